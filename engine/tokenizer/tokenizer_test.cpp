// Unit tests: pre-tokenizer splits, the byte table, StreamDecoder, loader
// errors and chat templates (against jinja2 renderings).
#include "tokenizer/tokenizer.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace braid {
namespace {

std::vector<std::string> Split(PreTokenizer kind, std::string_view text) {
  std::vector<unicode::Char> scratch;
  std::vector<Piece> pieces;
  PreTokenize(kind, text, scratch, pieces);
  std::vector<std::string> out;
  for (const Piece& p : pieces) out.emplace_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

using V = std::vector<std::string>;

TEST_CASE("pre-tokenizer splits") {
  CHECK(Split(PreTokenizer::kGpt2, "Hello world  it's 2024!!") ==
        V{"Hello", " world", " ", " it", "'s", " 2024", "!!"});
  CHECK(Split(PreTokenizer::kSmollm, "abc 123") == V{"abc", " ", "1", "2", "3"});
  CHECK(Split(PreTokenizer::kLlama3, "HELLO'S 12345 (x)\n\n  y") ==
        V{"HELLO", "'S", " ", "123", "45", " (", "x", ")\n\n", " ", " y"});
  CHECK(Split(PreTokenizer::kQwen2, "a12") == V{"a", "1", "2"});
  CHECK(Split(PreTokenizer::kLlama3, "a \t\n b") == V{"a", " \t\n", " b"});
  CHECK(Split(PreTokenizer::kGpt2, "a   ") == V{"a", "   "});
  CHECK(Split(PreTokenizer::kGpt2, "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC") ==
        V{"caf\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC"});
  // Invalid UTF-8 bytes are "other" characters and are kept.
  CHECK(Split(PreTokenizer::kGpt2, "a\xFF\xFE b") == V{"a", "\xFF\xFE", " b"});
  CHECK(Split(PreTokenizer::kSentencePiece, "a b") == V{"a b"});
  CHECK(Split(PreTokenizer::kGpt2, "").empty());
}

TEST_CASE("GPT-2 byte table") {
  CHECK(ByteToCodepoint(' ') == 0x120);   // 'Ġ'
  CHECK(ByteToCodepoint('\n') == 0x10A);  // 'Ċ'
  CHECK(ByteToCodepoint('a') == 'a');
  for (int b = 0; b < 256; ++b)
    CHECK(CodepointToByte(ByteToCodepoint(static_cast<uint8_t>(b))) == b);
  CHECK(CodepointToByte(0x2581) == -1);
}

// A tiny byte-level tokenizer: bytes a, b, c, space and "ab", "abc", " a".
const char* kTinyJson = R"({
  "added_tokens": [{"id": 7, "content": "<|end|>", "special": true}],
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5, "Ġa": 6, "<|end|>": 7},
            "merges": ["a b", ["ab", "c"], "Ġ a"]}})";

TEST_CASE("tiny tokenizer from JSON text") {
  auto tok = Tokenizer::FromJsonText(kTinyJson, "tiny.json");
  REQUIRE_MESSAGE(tok.ok(), tok.status().ToString());
  const Tokenizer& t = **tok;
  CHECK(t.n_vocab() == 8);
  // " ab": "a b" (rank 0) wins over "Ġ a" (rank 2).
  CHECK(t.Encode("abc ab<|end|>") == std::vector<int32_t>{5, 3, 4, 7});
  CHECK(t.Encode(" ac") == std::vector<int32_t>{6, 2});
  CHECK(t.Decode(std::vector<int32_t>{5, 3, 4, 7}) == "abc ab<|end|>");
  CHECK(t.Decode(std::vector<int32_t>{5, 7}, true) == "abc");
  CHECK(t.IsEog(7) == false);  // "<|end|>" is not an end-of-generation name
  CHECK(t.IsSpecial(7));
  CHECK_FALSE(t.IsSpecial(4));
}

TEST_CASE("user-defined tokens are text, matched whole with or without parse_special") {
  // "ab" is a non-special added token (HF's user-defined), "<|end|>" a special one.
  const char* json = R"({
    "added_tokens": [{"id": 7, "content": "<|end|>", "special": true},
                     {"id": 4, "content": "ab", "special": false}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5, "Ġa": 6, "<|end|>": 7},
              "merges": ["a b", ["ab", "c"], "Ġ a"]}})";
  auto tok = Tokenizer::FromJsonText(json, "user.json");
  REQUIRE_MESSAGE(tok.ok(), tok.status().ToString());
  const Tokenizer& t = **tok;
  // Matched before BPE: "abc" is not formed across it.
  CHECK(t.Encode("abc", true) == std::vector<int32_t>{4, 2});
  CHECK(t.Encode("abc", false) == std::vector<int32_t>{4, 2});
  CHECK(t.Encode("ab<|end|>", true) == std::vector<int32_t>{4, 7});
  // "<|end|>" as text: its bytes have no token here and are dropped.
  CHECK(t.Encode("ab<|end|>", false) == std::vector<int32_t>{4});
  CHECK_FALSE(t.IsSpecial(4));
  // In pieces, across piece boundaries and in plain pieces too.
  const std::vector<PromptPiece> pieces = {MarkupPiece("a"), PlainPiece("bc")};
  CHECK(t.Encode(pieces) == std::vector<int32_t>{4, 2});
}

TEST_CASE("JSON errors name the file and the field") {
  const auto err = [](const std::string& text) {
    auto r = Tokenizer::FromJsonText(text, "t.json");
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(err("{").find("t.json: not valid JSON") == 0);
  CHECK(err("[]") == "t.json: the top level is not an object");
  CHECK(err(R"({"model": {"type": "Unigram"}})").find("model.type 'Unigram'") != std::string::npos);
  const std::string needle = "\"Ġ a\"";
  std::string bad_merge = kTinyJson;
  bad_merge.replace(bad_merge.find(needle), needle.size(), "12");
  CHECK(err(bad_merge) == "t.json: model.merges[2] is not a string or pair");
  std::string unknown = kTinyJson;
  unknown.replace(unknown.find(needle), needle.size(), "\"Ġ z\"");
  CHECK(err(unknown) == "t.json: model.merges[2]: unknown token 'z'");
  std::string deep(100000, '[');
  CHECK(err(deep).find("nested deeper") != std::string::npos);
  auto missing = Tokenizer::FromJsonFile("/nonexistent/tokenizer.json");
  CHECK(missing.status().code() == StatusCode::kNotFound);
}

TEST_CASE("tokenizer.json: Gemma's split at spaces after replacing them is accepted") {
  // Gemma 3's layout: spaces replaced by U+2581, then a Split on " " (which
  // finds nothing), a byte-fallback BPE.
  const std::string body = R"("model": {"type": "BPE", "byte_fallback": true,
      "vocab": {"<unk>": 0, "▁": 1, "a": 2, "b": 3, "▁a": 4, "ab": 5},
      "merges": [["▁", "a"], ["a", "b"]]}})";
  const std::string split =
      R"({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
          "invert": false})";
  auto tok = Tokenizer::FromJsonText(
      R"({"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
          "pre_tokenizer": )" +
          split + "," + body,
      "gemma.json");
  REQUIRE_MESSAGE(tok.ok(), tok.status().ToString());
  CHECK((*tok)->Encode("ab a") == std::vector<int32_t>{5, 4});
  const std::vector<int32_t> ids = {5, 4};
  CHECK((*tok)->Decode(ids) == "ab a");
  // Without the normalizer, a split at spaces would matter: still refused.
  auto alone = Tokenizer::FromJsonText(R"({"pre_tokenizer": )" + split + "," + body, "s.json");
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.status().message() == "s.json: pre_tokenizer.pattern is not a Regex");
}

TEST_CASE("StreamDecoder holds back incomplete UTF-8") {
  // Tokens whose bytes split a 4-byte emoji (U+1F600 = F0 9F 98 80).
  const char* json = R"({"pre_tokenizer": {"type": "ByteLevel", "use_regex": true},
    "added_tokens": [{"id": 3, "content": "<s>", "special": true}],
    "model": {"type": "BPE", "vocab": {"ðŁ": 0, "ĺ": 1, "Ģ": 2, "<s>": 3, "a": 4}, "merges": []}})";
  auto tok = Tokenizer::FromJsonText(json, "s.json");
  REQUIRE_MESSAGE(tok.ok(), tok.status().ToString());
  CHECK((*tok)->TokenBytes(0) == "\xF0\x9F");
  StreamDecoder dec(**tok);
  CHECK(dec.Push(4) == "a");
  CHECK(dec.Push(0).empty());
  CHECK(dec.Push(3).empty());  // special, skipped
  CHECK(dec.Push(1).empty());
  CHECK(dec.Push(2) == "\xF0\x9F\x98\x80");
  CHECK(dec.Push(0).empty());
  CHECK(dec.Flush() == "\xEF\xBF\xBD");
  StreamDecoder keep(**tok, /*skip_special=*/false);
  CHECK(keep.Push(3) == "<s>");
  CHECK(keep.Push(1) == "\xEF\xBF\xBD");  // a lone continuation byte
}

TEST_CASE("chat templates match jinja2") {
  // chat_templates.json (tokenizer_fixtures.py) and gemma3_chat_templates.json
  // (tokenizer_gemma3.py: transformers' apply_chat_template, equal to jinja2's).
  std::ifstream in(test::FixturePath("chat_templates.json"));
  auto cases = nlohmann::json::parse(in);
  REQUIRE(cases.size() > 10);
  std::ifstream gemma_in(test::FixturePath("gemma3_chat_templates.json"));
  const auto gemma = nlohmann::json::parse(gemma_in);
  REQUIRE(gemma.size() >= 10);
  for (const auto& c : gemma) cases.push_back(c);
  for (const auto& c : cases) {
    const std::string fam = c["format"];
    const ChatFormat want = fam == "chatml"   ? ChatFormat::kChatML
                            : fam == "llama3" ? ChatFormat::kLlama3
                            : fam == "llama2" ? ChatFormat::kLlama2
                            : fam == "gemma"  ? ChatFormat::kGemma
                                              : ChatFormat::kMistral;
    const ChatFormat got = DetectChatFormat(c["template"].get<std::string>(), ChatFormat::kChatML);
    CHECK(got == want);
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"]) msgs.push_back({m["role"], m["content"]});
    const std::string out = ApplyChatTemplate(got, msgs, c["add_generation_prompt"].get<bool>(),
                                              c["default_system"].get<std::string>());
    CHECK_MESSAGE(out == c["expected"].get<std::string>(),
                  fam << ": " << nlohmann::json(out).dump());
  }
  CHECK(DetectChatFormat("", ChatFormat::kMistral) == ChatFormat::kMistral);
}

}  // namespace
}  // namespace braid
