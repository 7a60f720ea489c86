// libFuzzer target for the tokenizer: the input as tokenizer.json text (must
// fail cleanly or load; a loaded tokenizer encodes and decodes a slice of the
// input), then the input as text for small built-in tokenizers of every
// family, where decode(encode(x)) == x must hold for any bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

using braid::Tokenizer;

// A byte-level tokenizer with every byte, a few merges and two special tokens.
std::string ByteLevelJson(const char* pre) {
  nlohmann::json vocab = nlohmann::json::object();
  // GPT-2 bytes_to_unicode.
  int next = 256;
  std::vector<std::string> sym(256);
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    sym[b] = s;
    vocab[s] = b;
  }
  const std::string sp = sym[' '];
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"th", "e"}, {sp, "the"}, {sp, "a"}, {"e", "r"}, {sp, sp}, {"1", "2"}};
  nlohmann::json m = nlohmann::json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = static_cast<int>(vocab.size());
    m.push_back(a + " " + b);
  }
  vocab["<|im_start|>"] = static_cast<int>(vocab.size());
  vocab["<|im_end|>"] = static_cast<int>(vocab.size());
  nlohmann::json j;
  j["added_tokens"] = {
      {{"id", vocab["<|im_start|>"]}, {"content", "<|im_start|>"}, {"special", true}},
      {{"id", vocab["<|im_end|>"]}, {"content", "<|im_end|>"}, {"special", true}}};
  j["pre_tokenizer"] = nlohmann::json::parse(pre);
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}};
  return j.dump();
}

std::string SpmJson() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab[buf] = 3 + b;
  }
  for (const char* t : {"\xE2\x96\x81", "a", "b",
                        "\xE2\x96\x81"
                        "a",
                        "ab",
                        "\xE2\x96\x81"
                        "ab"}) {
    vocab[t] = static_cast<int>(vocab.size());
  }
  nlohmann::json j;
  j["added_tokens"] = {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                       {{"id", 1}, {"content", "<s>"}, {"special", true}},
                       {{"id", 2}, {"content", "</s>"}, {"special", true}}};
  j["normalizer"] = nlohmann::json::parse(
      R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]})");
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"unk_token", "<unk>"},
                {"byte_fallback", true},
                {"merges", {"▁ a", "a b", "▁a b"}}};
  return j.dump();
}

std::vector<std::unique_ptr<Tokenizer>> BuiltIn() {
  std::vector<std::unique_ptr<Tokenizer>> out;
  const char* pres[] = {
      R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})",
      R"({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel","use_regex":true}]})",
      R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","use_regex":false}]})",
      R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","use_regex":false}]})",
  };
  for (const char* pre : pres) {
    auto t = Tokenizer::FromJsonText(ByteLevelJson(pre), "builtin.json");
    if (!t.ok()) {
      std::fprintf(stderr, "built-in tokenizer: %s\n", t.status().ToString().c_str());
      std::abort();
    }
    out.push_back(std::move(t).value());
  }
  auto spm = Tokenizer::FromJsonText(SpmJson(), "spm.json");
  if (!spm.ok()) {
    std::fprintf(stderr, "built-in spm tokenizer: %s\n", spm.status().ToString().c_str());
    std::abort();
  }
  out.push_back(std::move(spm).value());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  auto loaded = Tokenizer::FromJsonText(input, "fuzz.json");
  if (loaded.ok()) {
    const Tokenizer& t = **loaded;
    const std::vector<int32_t> ids = t.Encode(input.substr(0, 512), true, true);
    for (int32_t id : ids) {
      if (id < 0 || id >= t.n_vocab()) std::abort();
    }
    (void)t.Decode(ids);
    braid::StreamDecoder dec(t);
    for (int32_t id : ids) (void)dec.Push(id);
    (void)dec.Flush();
  }

  static const std::vector<std::unique_ptr<Tokenizer>> builtin = BuiltIn();
  // SentencePiece decodes a literal U+2581 in the text as a space.
  const bool has_space_mark = input.find("\xE2\x96\x81") != std::string_view::npos;
  for (const auto& t : builtin) {
    const std::vector<int32_t> ids = t->Encode(input, /*parse_special=*/false);
    const bool spm = t->pre_tokenizer() == braid::PreTokenizer::kSentencePiece;
    if (!(spm && has_space_mark) && t->Decode(ids) != input) {
      std::fprintf(stderr, "round trip failed (pre-tokenizer %d)\n",
                   static_cast<int>(t->pre_tokenizer()));
      std::abort();
    }
    // Pieces cut anywhere (even inside a character or a special token's
    // text) give the ids of the whole text when they agree on special tokens.
    const size_t cut = size == 0 ? 0 : data[0] % (size + 1);
    std::vector<braid::PromptPiece> pieces = {braid::PlainPiece(std::string(input.substr(0, cut))),
                                              braid::PlainPiece(std::string(input.substr(cut)))};
    if (t->Encode(pieces) != ids) {
      std::fprintf(stderr, "plain pieces differ from the whole text\n");
      std::abort();
    }
    pieces[0].allow_special = pieces[1].allow_special = true;
    if (t->Encode(pieces) != t->Encode(input, /*parse_special=*/true)) {
      std::fprintf(stderr, "special pieces differ from the whole text\n");
      std::abort();
    }
  }
  return 0;
}
