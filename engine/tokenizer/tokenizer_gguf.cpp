// Tokenizer::FromGguf: the tokenizer.ggml.* keys (llama.cpp's convention).
#include <string>
#include <string_view>

#include "model/gguf_reader.h"
#include "tokenizer/bpe_tokenizer.h"

namespace braid {
namespace {

constexpr const char* kModel = "tokenizer.ggml.model";
constexpr const char* kPre = "tokenizer.ggml.pre";
constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kTypes = "tokenizer.ggml.token_type";
constexpr const char* kScores = "tokenizer.ggml.scores";
constexpr const char* kMerges = "tokenizer.ggml.merges";

// The pre-tokenizer of a tokenizer.ggml.pre name (llama.cpp's groups of names
// sharing one regex); false when unknown.
bool PreFromName(const std::string& pre, PreTokenizer& out, bool& ignore_merges) {
  ignore_merges = false;
  if (pre.empty() || pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    out = PreTokenizer::kGpt2;
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
             pre == "codeshell" || pre == "exaone" || pre == "minerva") {
    out = PreTokenizer::kSmollm;
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe" ||
             pre == "dbrx") {
    out = PreTokenizer::kLlama3;
    ignore_merges = true;
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    out = PreTokenizer::kQwen2;
  } else {
    return false;
  }
  return true;
}

// An optional token id key: -1 when absent; out of range is an error.
Status ReadId(const GgufFile& f, const std::string& key, size_t n_vocab, int32_t& out) {
  out = -1;
  if (f.Find(key) == nullptr) return Status::Ok();
  Result<uint64_t> v = f.GetUInt(key);
  if (!v.ok()) return v.status();
  if (*v >= n_vocab) {
    return Status::InvalidArgument(f.path() + ": " + key + " = " + std::to_string(*v) +
                                   " is out of range (n_vocab " + std::to_string(n_vocab) + ")");
  }
  out = static_cast<int32_t>(*v);
  return Status::Ok();
}

Result<bool> ReadBool(const GgufFile& f, const std::string& key, bool fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return f.GetBool(key);
}

// Gemma's SentencePiece vocabulary as HF tokenizers reads it (transformers'
// GGUF loader, gguf_tokenizer_mapping.py gemma_tokenizer, picked by
// architecture as there):
//  * a token of two or more spaces ("  ", user-defined) is the run of '▁' that
//    the text becomes after the ' ' -> '▁' normalizer, and an ordinary token
//    that BPE merges into (not matched whole in the raw text);
//  * merges rank by position in the file, not by score: the scores fall with
//    the id for ordinary tokens, but are -1000 for the user-defined ones,
//    which rank by their low ids (the space runs merge before anything else).
void AdaptGemmaVocab(VocabSpec& spec) {
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    std::string& t = spec.tokens[i];
    if (t.size() >= 2 && t.find_first_not_of(' ') == std::string::npos) {
      const size_t n = t.size();
      t.clear();
      for (size_t k = 0; k < n; ++k) t += kSpaceMark;
      if (spec.kinds[i] == TokenKind::kUserDefined) spec.kinds[i] = TokenKind::kNormal;
    }
    spec.scores[i] = -static_cast<float>(i);  // exact: n < 2^24
  }
  spec.longer_left_first = true;
}

bool HasControlToken(const VocabSpec& spec, std::string_view text) {
  for (size_t i = 0; i < spec.tokens.size(); ++i)
    if (spec.tokens[i] == text) return spec.kinds[i] == TokenKind::kControl;
  return false;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  const std::string& path = file.path();
  VocabSpec spec;
  spec.name = path;
  spec.merges_field = kMerges;

  Result<std::string> model = file.GetString(kModel);
  if (!model.ok()) return model.status();
  if (*model == "gpt2") {
    spec.byte_level = true;
  } else if (*model == "llama") {
    spec.byte_level = false;
    spec.merges_by_score = true;
    spec.pre = PreTokenizer::kSentencePiece;
  } else {
    return Status::Unsupported(path + ": " + kModel + " '" + *model +
                               "' is not supported (expected gpt2 or llama)");
  }
  if (spec.byte_level) {
    std::string pre;
    if (file.Find(kPre) != nullptr) {
      Result<std::string> p = file.GetString(kPre);
      if (!p.ok()) return p.status();
      pre = *p;
    }
    if (!PreFromName(pre, spec.pre, spec.ignore_merges)) {
      return Status::Unsupported(path + ": " + kPre + " '" + pre + "' is not supported");
    }
  }

  BRAID_ASSIGN_OR_RETURN(spec.tokens, file.GetStringArray(kTokens));
  const size_t n = spec.tokens.size();
  if (n == 0) return Status::InvalidArgument(path + ": " + kTokens + " is empty");
  if (file.Find(kTypes) != nullptr) {
    BRAID_ASSIGN_OR_RETURN(std::vector<int64_t> types, file.GetIntArray(kTypes));
    if (types.size() != n) {
      return Status::InvalidArgument(path + ": " + kTypes + " has " + std::to_string(types.size()) +
                                     " entries for " + std::to_string(n) + " tokens");
    }
    spec.kinds.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > 6) {
        return Status::InvalidArgument(path + ": " + kTypes + "[" + std::to_string(i) +
                                       "] = " + std::to_string(types[i]) + " is not a token type");
      }
      spec.kinds[i] = static_cast<TokenKind>(types[i]);
    }
  } else {
    spec.kinds.assign(n, TokenKind::kNormal);
  }
  if (file.Find(kScores) != nullptr) {
    BRAID_ASSIGN_OR_RETURN(std::vector<double> scores, file.GetFloatArray(kScores));
    if (scores.size() != n) {
      return Status::InvalidArgument(path + ": " + kScores + " has " +
                                     std::to_string(scores.size()) + " entries for " +
                                     std::to_string(n) + " tokens");
    }
    spec.scores.assign(scores.begin(), scores.end());
  } else if (spec.merges_by_score) {
    return Status::InvalidArgument(path + ": " + kScores + " is required for " + kModel +
                                   " 'llama'");
  }
  if (spec.byte_level) {
    BRAID_ASSIGN_OR_RETURN(std::vector<std::string> merges, file.GetStringArray(kMerges));
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const size_t sp = merges[i].find(' ', 1);
      if (sp == std::string::npos) {
        return Status::InvalidArgument(path + ": " + kMerges + "[" + std::to_string(i) + "] '" +
                                       merges[i] + "' has no space");
      }
      spec.merges.emplace_back(merges[i].substr(0, sp), merges[i].substr(sp + 1));
    }
  }

  int32_t pad = -1, eot = -1, eom = -1;
  BRAID_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.bos_token_id", n, spec.bos));
  BRAID_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.eos_token_id", n, spec.eos));
  BRAID_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.unknown_token_id", n, spec.unk));
  BRAID_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.padding_token_id", n, pad));
  BRAID_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.eot_token_id", n, eot));
  BRAID_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.eom_token_id", n, eom));
  // llama.cpp's defaults: SentencePiece adds bos and a space prefix; BPE adds
  // bos only for llama3.
  const bool bos_default = !spec.byte_level || spec.pre == PreTokenizer::kLlama3;
  BRAID_ASSIGN_OR_RETURN(spec.add_bos, ReadBool(file, "tokenizer.ggml.add_bos_token", bos_default));
  BRAID_ASSIGN_OR_RETURN(bool space_prefix,
                         ReadBool(file, "tokenizer.ggml.add_space_prefix", !spec.byte_level));
  if (!spec.byte_level)
    spec.space_prefix = space_prefix ? SpacePrefix::kAlways : SpacePrefix::kNone;
  std::string arch;
  if (file.Find("general.architecture") != nullptr) {
    BRAID_ASSIGN_OR_RETURN(arch, file.GetString("general.architecture"));
  }
  if (spec.merges_by_score && (arch == "gemma" || arch == "gemma2" || arch == "gemma3"))
    AdaptGemmaVocab(spec);
  if (file.Find("tokenizer.chat_template") != nullptr) {
    BRAID_ASSIGN_OR_RETURN(spec.chat_template, file.GetString("tokenizer.chat_template"));
  } else if (HasControlToken(spec, "<start_of_turn>") && HasControlToken(spec, "<end_of_turn>")) {
    // Gemma GGUFs often carry no template; their turns are Gemma's.
    spec.chat_template = GemmaChatTemplate();
  }

  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, BpeTokenizer::Build(std::move(spec)));
  for (int32_t id : {eot, eom}) {
    if (id >= 0) static_cast<BpeTokenizer*>(tok.get())->AddEog(id);
  }
  return tok;
}

}  // namespace braid
