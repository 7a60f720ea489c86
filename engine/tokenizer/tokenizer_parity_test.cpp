// Parity with Hugging Face `tokenizers` on the fixture corpus
// (scripts/reference/tokenizer_fixtures.py): the SmolLM2 GGUF, the same
// vocabulary through tokenizer.json, and the small llama3 / qwen2 /
// SentencePiece-style tokenizers trained by the script.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/gguf_reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace braid {
namespace {

// Checks ids against the fixture and the decode round trip; returns how many
// strings matched.
size_t CheckParity(const Tokenizer& tok, const std::vector<std::string>& corpus,
                   const std::string& ids_file, bool round_trip, bool parse_special = true) {
  const auto expected = test::ReadJsonLines(ids_file);
  REQUIRE(expected.size() <= corpus.size());
  REQUIRE(expected.size() > 0);
  size_t same = 0, shown = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const std::vector<int32_t> want = expected[i].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.Encode(corpus[i], parse_special);
    if (got == want) {
      ++same;
    } else if (shown++ < 5) {
      std::string g, w;
      for (int32_t id : got) g += std::to_string(id) + " ";
      for (int32_t id : want) w += std::to_string(id) + " ";
      FAIL_CHECK("string " << i << " " << nlohmann::json(corpus[i]).dump() << "\n  got:  " << g
                           << "\n  want: " << w);
    }
    if (round_trip) CHECK_MESSAGE(tok.Decode(got) == corpus[i], "round trip of string " << i);
  }
  CHECK(same == expected.size());
  return same;
}

std::unique_ptr<GgufFile> OpenModel() {
  auto f = GgufFile::Open(BRAID_MODEL_PATH);
  REQUIRE_MESSAGE(f.ok(), f.status().ToString());
  return std::move(f).value();
}

TEST_CASE("SmolLM2 GGUF tokenizer matches HF tokenizers on the corpus") {
  auto file = OpenModel();
  auto tok = Tokenizer::FromGguf(*file);
  REQUIRE_MESSAGE(tok.ok(), tok.status().ToString());
  const Tokenizer& t = **tok;
  CHECK(t.n_vocab() == 49152);
  CHECK(t.pre_tokenizer() == PreTokenizer::kSmollm);
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK_FALSE(t.add_bos_by_default());
  CHECK(t.IsEog(0));
  CHECK(t.IsEog(2));
  CHECK_FALSE(t.IsEog(1));
  CHECK(DetectChatFormat(t.chat_template(), ChatFormat::kLlama2) == ChatFormat::kChatML);

  const auto corpus = test::ReadCorpus();
  REQUIRE(corpus.size() >= 2000);
  const size_t same = CheckParity(t, corpus, test::FixturePath("smollm2_ids.jsonl"), true);
  MESSAGE("SmolLM2 (GGUF): " << same << " of " << corpus.size() << " strings identical");

  // Encoding speed over the corpus (reported, not asserted).
  size_t bytes = 0;
  for (const auto& s : corpus) bytes += s.size();
  const auto t0 = std::chrono::steady_clock::now();
  size_t n_tokens = 0;
  int reps = 0;
  do {
    for (const auto& s : corpus) n_tokens += t.Encode(s).size();
    ++reps;
  } while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("SmolLM2 encode: " << (bytes * reps / secs / 1e6) << " MB/s, " << (n_tokens / secs / 1e6)
                             << " Mtokens/s (" << reps << " passes over " << bytes << " bytes)");
}

TEST_CASE("parse_special=false and add_bos on SmolLM2") {
  auto file = OpenModel();
  auto tok = Tokenizer::FromGguf(*file);
  REQUIRE(tok.ok());
  const Tokenizer& t = **tok;
  CHECK(t.Encode("<|im_start|>user", true) == std::vector<int32_t>{1, 4093});
  const auto plain = t.Encode("<|im_start|>", false);
  CHECK(plain.size() > 1);
  CHECK(t.Decode(plain) == "<|im_start|>");
  CHECK(t.Encode("hi", true, true).front() == 1);
  CHECK(t.Decode(std::vector<int32_t>{1, 4093, 2}, true) == "user");
  CHECK(t.TokenBytes(-1).empty());
  CHECK(t.TokenBytes(49152).empty());
}

// The GGUF's vocabulary written as a tokenizer.json the way HF `tokenizers`
// saves the reference (the 3.5 MB file is generated here, not committed).
std::string SmolLm2Json(const GgufFile& file) {
  using nlohmann::json;
  const auto tokens = file.GetStringArray("tokenizer.ggml.tokens").value();
  const auto types = file.GetIntArray("tokenizer.ggml.token_type").value();
  const auto merges = file.GetStringArray("tokenizer.ggml.merges").value();
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array();
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = i;
    if (types[i] == 3) {
      j["added_tokens"].push_back({{"id", i},
                                   {"content", tokens[i]},
                                   {"single_word", false},
                                   {"lstrip", false},
                                   {"rstrip", false},
                                   {"normalized", false},
                                   {"special", true}});
    }
  }
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Digits"}, {"individual_digits", true}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}}}}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  json m = json::array();
  for (const auto& s : merges) {
    const size_t sp = s.find(' ', 1);
    m.push_back({s.substr(0, sp), s.substr(sp + 1)});
  }
  j["model"] = {{"type", "BPE"},          {"dropout", nullptr},
                {"unk_token", nullptr},   {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab},         {"merges", m}};
  return j.dump();
}

TEST_CASE("SmolLM2 through tokenizer.json matches too") {
  auto file = OpenModel();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("braid_tok_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tokenizer.json").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << SmolLm2Json(*file);
  }
  auto tok = Tokenizer::FromJsonFile(path);
  std::filesystem::remove_all(dir);
  REQUIRE_MESSAGE(tok.ok(), tok.status().ToString());
  CHECK((*tok)->pre_tokenizer() == PreTokenizer::kSmollm);
  CHECK((*tok)->IsEog(0));
  const auto corpus = test::ReadCorpus();
  const size_t same = CheckParity(**tok, corpus, test::FixturePath("smollm2_ids.jsonl"), true);
  MESSAGE("SmolLM2 (tokenizer.json): " << same << " strings identical");
}

// Bytes that SmolLM2's byte-level vocabulary has no token for (0x04, 0x06,
// 0x13, 0x14, 0x16, 0x1d): HF tokenizers drops them and merges across the gap;
// nothing may stand in for them, least of all <|endoftext|> (the GGUF's
// unknown token). Also special-token text encoded as plain text.
// Fixture: scripts/reference/tokenizer_edge_fixtures.py.
void CheckEdgeCases(const Tokenizer& t) {
  const auto rows = test::ReadJsonLines(test::FixturePath("smollm2_edge.jsonl"));
  REQUIRE(rows.size() > 100);
  size_t missing = 0;
  for (const auto& row : rows) {
    const std::string text = row["text"];
    const bool special = row["special"];
    const auto want = row["ids"].get<std::vector<int32_t>>();
    CAPTURE(nlohmann::json(text).dump());
    CHECK(t.Encode(text, special) == want);
    const PromptPiece piece{text, special};
    CHECK(t.Encode(std::span<const PromptPiece>(&piece, 1)) == want);
    if (row["case"] == "missing_bytes") {
      ++missing;
      for (int32_t id : want) CHECK_FALSE(t.IsEog(id));
    }
  }
  CHECK(missing > 60);
}

TEST_CASE("SmolLM2: bytes with no token are dropped as by HF tokenizers") {
  auto file = OpenModel();
  auto gguf = Tokenizer::FromGguf(*file);
  REQUIRE(gguf.ok());
  // The premise: byte 0x04 has no token, and the GGUF's unknown token ends text.
  CHECK((*gguf)->Encode("\x04", false).empty());
  CHECK((*gguf)->Encode("==\x04==", false) == (*gguf)->Encode("====", false));
  CheckEdgeCases(**gguf);

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("braid_tok_edge_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tokenizer.json").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << SmolLm2Json(*file);
  }
  auto json = Tokenizer::FromJsonFile(path);
  std::filesystem::remove_all(dir);
  REQUIRE(json.ok());
  CheckEdgeCases(**json);
}

TEST_CASE("small trained tokenizers match HF tokenizers") {
  const auto corpus = test::ReadCorpus();
  struct Case {
    const char* dir;
    PreTokenizer pre;
    ChatFormat chat;
  };
  for (const Case& c : {Case{"llama3", PreTokenizer::kLlama3, ChatFormat::kLlama3},
                        Case{"qwen2", PreTokenizer::kQwen2, ChatFormat::kChatML},
                        Case{"spm", PreTokenizer::kSentencePiece, ChatFormat::kLlama2}}) {
    CAPTURE(std::string(c.dir));
    auto tok = Tokenizer::FromJsonFile(test::FixturePath(std::string(c.dir) + "/tokenizer.json"));
    REQUIRE_MESSAGE(tok.ok(), tok.status().ToString());
    const Tokenizer& t = **tok;
    CHECK(t.pre_tokenizer() == c.pre);
    CHECK(DetectChatFormat(t.chat_template(), ChatFormat::kMistral) == c.chat);
    const size_t same =
        CheckParity(t, corpus, test::FixturePath(std::string(c.dir) + "/ids.jsonl"), true);
    MESSAGE(c.dir << ": " << same << " strings identical");
  }
}

// SentencePiece's own BPE (scores as priorities) through a tensor-less GGUF
// written like llama.cpp's converter (scripts/reference/tokenizer_spm_gguf.py).
// sentencepiece does not match control-token text, so neither do we here.
TEST_CASE("SentencePiece GGUF matches sentencepiece") {
  auto file = GgufFile::Open(test::FixturePath("spm_gguf/tokenizer.gguf"));
  REQUIRE_MESSAGE(file.ok(), file.status().ToString());
  auto tok = Tokenizer::FromGguf(**file);
  REQUIRE_MESSAGE(tok.ok(), tok.status().ToString());
  const Tokenizer& t = **tok;
  CHECK(t.pre_tokenizer() == PreTokenizer::kSentencePiece);
  CHECK(t.add_bos_by_default());
  CHECK(t.bos_id() == 1);
  CHECK(t.IsEog(2));
  const auto corpus = test::ReadCorpus();
  const size_t same = CheckParity(t, corpus, test::FixturePath("spm_gguf/ids.jsonl"), true, false);
  MESSAGE("spm_gguf: " << same << " strings identical");
  std::vector<int32_t> want = {1, 1};
  for (int32_t id : t.Encode("hi", false)) want.push_back(id);
  CHECK(t.Encode("<s>hi", true, true) ==
        want);  // a space prefix after a special token, as llama.cpp
}

TEST_CASE("bos and eos of the small tokenizers") {
  auto llama3 = Tokenizer::FromJsonFile(test::FixturePath("llama3/tokenizer.json"));
  REQUIRE(llama3.ok());
  CHECK((*llama3)->add_bos_by_default());
  CHECK((*llama3)->bos_id() >= 0);
  CHECK((*llama3)->Encode("hi", true, true).front() == (*llama3)->bos_id());
  CHECK((*llama3)->IsEog((*llama3)->eos_id()));
  auto spm = Tokenizer::FromJsonFile(test::FixturePath("spm/tokenizer.json"));
  REQUIRE(spm.ok());
  CHECK((*spm)->bos_id() == 1);
  CHECK((*spm)->eos_id() == 2);
  CHECK((*spm)->add_bos_by_default());
  CHECK((*spm)->IsEog(2));
  // Decode drops the space SentencePiece added, and maps byte tokens back.
  CHECK((*spm)->Decode((*spm)->Encode("Hello world")) == "Hello world");
  CHECK((*spm)->Decode((*spm)->Encode("\xF0\x9F\xA6\x80 crab")) == "\xF0\x9F\xA6\x80 crab");

  // A chat template that writes bos itself gets no second one from add_bos
  // (apply_chat_template(tokenize=True) has one); text that only spells it
  // in a plain piece does.
  for (const Tokenizer* tp : {(*spm).get(), (*llama3).get()}) {
    const Tokenizer& tok = *tp;
    const std::vector<ChatMessage> msgs = {{"user", "hi"}};
    const ChatFormat f = DetectChatFormat(tok.chat_template(), ChatFormat::kChatML);
    const auto pieces = ApplyChatTemplatePieces(f, msgs, false);
    const std::vector<int32_t> ids = tok.Encode(pieces, true);
    REQUIRE(ids.size() > 2);
    CHECK(ids[0] == tok.bos_id());
    CHECK(ids[1] != tok.bos_id());
    CHECK(ids == tok.Encode(pieces, false));
    const std::string bos_text = tok.Decode(std::vector<int32_t>{tok.bos_id()});
    const std::vector<PromptPiece> plain = {PlainPiece(bos_text + "hi")};
    CHECK(tok.Encode(plain, true).front() == tok.bos_id());
    CHECK(tok.Encode(plain, true) != tok.Encode(plain, false));
    CHECK(tok.Encode(bos_text + "hi", true, true)[1] == tok.bos_id());  // text: as HF, two
  }
}

}  // namespace
}  // namespace braid
