// Tokenizer::FromJsonFile / FromJsonText: Hugging Face tokenizer.json (BPE
// models only) and the tokenizer_config.json beside it. The family is read from
// the pre-tokenizer: ByteLevel (with a Split regex or Digits before it) for the
// byte-level ones, Metaspace or a '▁' normalizer for SentencePiece style.
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/bpe_tokenizer.h"

namespace braid {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 256;
constexpr int64_t kMaxId = 1 << 24;

// The split regexes of the families we implement, as tokenizer.json stores them.
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Rejects nesting deeper than kMaxDepth before parsing (keeps recursion in the
// parser and the destructor bounded on hostile input).
bool DepthOk(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

Result<json> ParseJson(std::string_view text, const std::string& name) {
  if (!DepthOk(text))
    return Status::InvalidArgument(name + ": JSON nested deeper than " + std::to_string(kMaxDepth));
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Status::InvalidArgument(name + ": not valid JSON (" + e.what() + ")");
  }
}

// Field access that never throws.
const json* Get(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}
bool GetBool(const json& obj, const char* key, bool fallback) {
  const json* v = Get(obj, key);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : fallback;
}
std::string GetString(const json& obj, const char* key) {
  const json* v = Get(obj, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

// The state collected while reading the pre-tokenizer and normalizer.
struct Family {
  bool byte_level = false, use_regex = true, digits = false, metaspace = false,
       spm_normalizer = false;
  std::string split_regex;  // empty when there is no Split
  SpacePrefix prefix = SpacePrefix::kNone;
  bool metaspace_split = false;
};

Status ReadPreTokenizer(const json& pt, const std::string& where, Family& f) {
  if (!pt.is_object()) return Status::InvalidArgument(where + " is not an object");
  const auto pattern_is_space = [](const json& split) {
    const json* pattern = Get(split, "pattern");
    return pattern != nullptr && GetString(*pattern, "String") == " " &&
           !GetBool(split, "invert", false);
  };
  const std::string type = GetString(pt, "type");
  if (type == "Sequence") {
    const json* list = Get(pt, "pretokenizers");
    if (list == nullptr || !list->is_array())
      return Status::InvalidArgument(where + ".pretokenizers is not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      BRAID_RETURN_IF_ERROR(
          ReadPreTokenizer((*list)[i], where + ".pretokenizers[" + std::to_string(i) + "]", f));
    }
  } else if (type == "ByteLevel") {
    f.byte_level = true;
    f.use_regex = GetBool(pt, "use_regex", true);
    if (GetBool(pt, "add_prefix_space", false)) {
      return Status::Unsupported(where + ".add_prefix_space = true is not supported");
    }
  } else if (type == "Digits") {
    if (!GetBool(pt, "individual_digits", false)) {
      return Status::Unsupported(where + ": Digits without individual_digits is not supported");
    }
    f.digits = true;
  } else if (type == "Split" && f.spm_normalizer && pattern_is_space(pt)) {
    // Gemma: a split at spaces after a normalizer that replaced every space
    // with U+2581 finds nothing to split.
  } else if (type == "Split") {
    const json* pattern = Get(pt, "pattern");
    const json* regex = pattern != nullptr ? Get(*pattern, "Regex") : nullptr;
    if (regex == nullptr || !regex->is_string()) {
      return Status::Unsupported(where + ".pattern is not a Regex");
    }
    if (GetBool(pt, "invert", false) || GetString(pt, "behavior") != "Isolated") {
      return Status::Unsupported(where + ": only Isolated, non-inverted splits are supported");
    }
    f.split_regex = regex->get<std::string>();
  } else if (type == "Metaspace") {
    f.metaspace = true;
    const std::string scheme = GetString(pt, "prepend_scheme");
    const bool add_prefix = GetBool(pt, "add_prefix_space", true);
    if (scheme == "never" || (scheme.empty() && !add_prefix))
      f.prefix = SpacePrefix::kNone;
    else if (scheme == "first")
      f.prefix = SpacePrefix::kFirstIfMissing;
    else
      f.prefix = SpacePrefix::kIfMissing;
    f.metaspace_split = GetBool(pt, "split", true);
    if (GetString(pt, "replacement") != kSpaceMark) {
      return Status::Unsupported(where + ".replacement is not U+2581");
    }
  } else {
    return Status::Unsupported(where + ".type '" + type + "' is not supported");
  }
  return Status::Ok();
}

// Normalizers: NFC (accepted as the identity on NFC text), and Llama 2's
// Prepend("▁") + Replace(" ", "▁").
Status ReadNormalizer(const json& n, const std::string& where, Family& f) {
  if (!n.is_object()) return Status::InvalidArgument(where + " is not an object");
  const std::string type = GetString(n, "type");
  if (type == "Sequence") {
    const json* list = Get(n, "normalizers");
    if (list == nullptr || !list->is_array())
      return Status::InvalidArgument(where + ".normalizers is not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      BRAID_RETURN_IF_ERROR(
          ReadNormalizer((*list)[i], where + ".normalizers[" + std::to_string(i) + "]", f));
    }
  } else if (type == "Prepend") {
    if (GetString(n, "prepend") != kSpaceMark)
      return Status::Unsupported(where + ": Prepend of other than U+2581");
    f.prefix = SpacePrefix::kAlways;
  } else if (type == "Replace") {
    const json* pattern = Get(n, "pattern");
    if (pattern == nullptr || GetString(*pattern, "String") != " " ||
        GetString(n, "content") != kSpaceMark) {
      return Status::Unsupported(where + ": only Replace(' ', U+2581) is supported");
    }
    f.spm_normalizer = true;
  } else if (type != "NFC") {
    return Status::Unsupported(where + ".type '" + type + "' is not supported");
  }
  return Status::Ok();
}

Status ChoosePreTokenizer(const Family& f, const std::string& name, VocabSpec& spec) {
  if (f.byte_level) {
    spec.byte_level = true;
    const std::string& r = f.split_regex;
    if (!r.empty() && !f.use_regex && !f.digits) {
      if (r == kLlama3Regex)
        spec.pre = PreTokenizer::kLlama3;
      else if (r == kQwen2Regex)
        spec.pre = PreTokenizer::kQwen2;
      else if (r == kGpt2Regex)
        spec.pre = PreTokenizer::kGpt2;
      else
        return Status::Unsupported(name +
                                   ": pre_tokenizer Split regex is not one of gpt2, llama3, qwen2");
    } else if (r.empty() && f.use_regex) {
      spec.pre = f.digits ? PreTokenizer::kSmollm : PreTokenizer::kGpt2;
    } else {
      return Status::Unsupported(name + ": pre_tokenizer combination is not supported");
    }
    return Status::Ok();
  }
  if (f.metaspace || f.spm_normalizer) {
    spec.byte_level = false;
    spec.pre = PreTokenizer::kSentencePiece;
    spec.space_prefix = f.prefix;
    spec.metaspace_split = f.metaspace && f.metaspace_split;
    return Status::Ok();
  }
  return Status::Unsupported(
      name +
      ": pre_tokenizer: cannot tell the family (no ByteLevel, Metaspace or U+2581 normalizer)");
}

// A token named in tokenizer_config.json: a string or {"content": ...}.
std::string TokenName(const json* v) {
  if (v == nullptr) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return GetString(*v, "content");
  return {};
}

Result<std::unique_ptr<Tokenizer>> Load(std::string_view text, const std::string& name,
                                        const json* config, const std::string& config_name) {
  BRAID_ASSIGN_OR_RETURN(json root, ParseJson(text, name));
  if (!root.is_object()) return Status::InvalidArgument(name + ": the top level is not an object");
  const json* model = Get(root, "model");
  if (model == nullptr || !model->is_object())
    return Status::InvalidArgument(name + ": model is missing or not an object");
  const std::string type = GetString(*model, "type");
  if (!type.empty() && type != "BPE")
    return Status::Unsupported(name + ": model.type '" + type + "' is not supported (only BPE)");
  const json* vocab = Get(*model, "vocab");
  if (vocab == nullptr || !vocab->is_object())
    return Status::InvalidArgument(name + ": model.vocab is missing or not an object");

  VocabSpec spec;
  spec.name = name;
  spec.merges_field = "model.merges";
  // Ids: the model's vocabulary, then the added tokens (which may repeat ids).
  std::vector<std::pair<int64_t, std::string>> entries;
  entries.reserve(vocab->size());
  int64_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= kMaxId) {
      return Status::InvalidArgument(name + ": model.vocab['" + it.key() + "'] is not a valid id");
    }
    entries.emplace_back(it.value().get<int64_t>(), it.key());
    max_id = std::max(max_id, entries.back().first);
  }
  struct Added {
    int64_t id;
    std::string content;
    bool special;
  };
  std::vector<Added> added;
  if (const json* list = Get(root, "added_tokens")) {
    if (!list->is_array()) return Status::InvalidArgument(name + ": added_tokens is not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      const json& t = (*list)[i];
      const json* id = Get(t, "id");
      const json* content = Get(t, "content");
      if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
          id->get<int64_t>() >= kMaxId || content == nullptr || !content->is_string()) {
        return Status::InvalidArgument(name + ": added_tokens[" + std::to_string(i) +
                                       "] needs an id and a content");
      }
      added.push_back(
          {id->get<int64_t>(), content->get<std::string>(), GetBool(t, "special", false)});
      max_id = std::max(max_id, added.back().id);
    }
  }
  const size_t n = static_cast<size_t>(max_id + 1);
  spec.tokens.assign(n, std::string());
  spec.kinds.assign(n, TokenKind::kUnused);
  std::vector<char> seen(n, 0);
  for (const auto& [id, tok] : entries) {
    if (seen[id])
      return Status::InvalidArgument(name + ": model.vocab: id " + std::to_string(id) +
                                     " is used twice");
    seen[id] = 1;
    spec.tokens[id] = tok;
    spec.kinds[id] = TokenKind::kNormal;
  }
  for (const Added& a : added) {
    if (seen[a.id] && spec.tokens[a.id] != a.content) {
      return Status::InvalidArgument(name + ": added token '" + a.content + "' reuses the id " +
                                     std::to_string(a.id) + " of '" + spec.tokens[a.id] + "'");
    }
    seen[a.id] = 1;
    spec.tokens[a.id] = a.content;
    spec.kinds[a.id] = a.special ? TokenKind::kControl : TokenKind::kUserDefined;
  }

  // Merges: "a b" strings or ["a", "b"] pairs.
  if (const json* merges = Get(*model, "merges")) {
    if (!merges->is_array())
      return Status::InvalidArgument(name + ": model.merges is not an array");
    spec.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const json& m = (*merges)[i];
      const std::string where = name + ": model.merges[" + std::to_string(i) + "]";
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return Status::InvalidArgument(where + " '" + s +
                                         "' is not two tokens separated by one space");
        }
        spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        return Status::InvalidArgument(where + " is not a string or pair");
      }
    }
  }
  spec.ignore_merges = GetBool(*model, "ignore_merges", false);
  spec.byte_fallback = GetBool(*model, "byte_fallback", false);
  if (!GetString(*model, "continuing_subword_prefix").empty() ||
      !GetString(*model, "end_of_word_suffix").empty()) {
    return Status::Unsupported(
        name + ": model.continuing_subword_prefix/end_of_word_suffix are not supported");
  }
  const auto find_id = [&](const std::string& tok) -> int32_t {
    if (tok.empty()) return -1;
    for (size_t i = 0; i < n; ++i) {
      if (seen[i] && spec.tokens[i] == tok) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (const std::string unk = GetString(*model, "unk_token"); !unk.empty()) {
    spec.unk = find_id(unk);
    if (spec.unk < 0)
      return Status::InvalidArgument(name + ": model.unk_token '" + unk +
                                     "' is not in the vocabulary");
    if (spec.kinds[spec.unk] == TokenKind::kNormal) spec.kinds[spec.unk] = TokenKind::kUnknown;
    spec.unk_for_missing_bytes = true;  // HF's BPE: a character with no token becomes unk_token
  }

  Family family;
  if (const json* norm = Get(root, "normalizer"))
    BRAID_RETURN_IF_ERROR(ReadNormalizer(*norm, name + ": normalizer", family));
  if (const json* pt = Get(root, "pre_tokenizer"))
    BRAID_RETURN_IF_ERROR(ReadPreTokenizer(*pt, name + ": pre_tokenizer", family));
  BRAID_RETURN_IF_ERROR(ChoosePreTokenizer(family, name, spec));

  // bos from a TemplateProcessing post-processor that starts with a special token.
  if (const json* post = Get(root, "post_processor")) {
    const json* single =
        GetString(*post, "type") == "TemplateProcessing" ? Get(*post, "single") : nullptr;
    if (single != nullptr && single->is_array() && !single->empty()) {
      const json* st = Get((*single)[0], "SpecialToken");
      if (st != nullptr) {
        spec.bos = find_id(GetString(*st, "id"));
        spec.add_bos = spec.bos >= 0;
      }
    }
  }
  // tokenizer_config.json: chat template, bos/eos names, add_bos_token.
  if (config != nullptr) {
    if (!config->is_object())
      return Status::InvalidArgument(config_name + ": the top level is not an object");
    if (const json* t = Get(*config, "chat_template")) {
      if (t->is_string()) {
        spec.chat_template = t->get<std::string>();
      } else if (t->is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const json& e : *t) {
          if (GetString(e, "name") == "default") spec.chat_template = GetString(e, "template");
        }
      } else {
        return Status::InvalidArgument(config_name + ": chat_template is not a string or list");
      }
    }
    for (const char* key : {"bos_token", "eos_token"}) {
      const std::string tok = TokenName(Get(*config, key));
      if (tok.empty()) continue;
      const int32_t id = find_id(tok);
      if (id < 0)
        return Status::InvalidArgument(config_name + ": " + key + " '" + tok +
                                       "' is not in the vocabulary");
      (std::string_view(key) == "bos_token" ? spec.bos : spec.eos) = id;
    }
    spec.add_bos = GetBool(*config, "add_bos_token", spec.add_bos);
  }
  return BpeTokenizer::Build(std::move(spec));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonText(std::string_view json_text,
                                                           const std::string& name) {
  return Load(json_text, name, nullptr, "");
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonFile(const std::string& path) {
  const auto read = [](const std::string& p, std::string& out) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return false;
    std::ostringstream ss;
    ss << in.rdbuf();
    out = ss.str();
    return static_cast<bool>(in) || in.eof();
  };
  std::string text;
  if (!read(path, text)) return Status::NotFound(path + ": cannot read the file");
  const size_t slash = path.find_last_of('/');
  const std::string config_path =
      (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
      "tokenizer_config.json";
  std::string config_text;
  if (read(config_path, config_text)) {
    BRAID_ASSIGN_OR_RETURN(json config, ParseJson(config_text, config_path));
    return Load(text, path, &config, config_path);
  }
  return Load(text, path, nullptr, "");
}

}  // namespace braid
