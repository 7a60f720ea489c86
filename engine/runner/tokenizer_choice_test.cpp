// Which tokenizer Model::Open reads: a safetensors checkpoint's own
// tokenizer.json, or ModelOptions::tokenizer (a file or a folder holding
// one); a checkpoint with neither is refused at Open, naming what was looked
// for, instead of loading and tokenizing every prompt to nothing.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "engine/model.h"
#include "model/test_files.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

// The tokenizer fixture has 2,048 tokens.
const std::string kTokenizerDir = std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2";

// A tiny checkpoint (config.json and model.safetensors, no tokenizer) whose
// vocabulary is large enough for the fixture tokenizer.
void WriteCheckpoint(const test::TempDir& dir) {
  test::TinyModel tm;  // the shapes of tests/fixtures/models/llama_tiny
  tm.n_vocab = 2064;
  tm.n_embd = 64;
  tm.n_head = 4;
  tm.n_head_kv = 2;
  tm.n_ff = 128;
  dir.Write("config.json", test::TinyHfConfig(tm));
  dir.Write("model.safetensors", test::TinySafetensors(tm).Build());
}

ModelOptions Options(const std::string& path) {
  ModelOptions mo;
  mo.path = path;
  mo.threads = 1;
  mo.context = 32;
  mo.cpu.stream = CpuOptions::Stream::kTemporal;  // no timing at load
  return mo;
}

TEST_CASE("Model::Open refuses a checkpoint without a tokenizer, naming what it looked for") {
  test::TempDir dir;
  WriteCheckpoint(dir);
  auto m = Model::Open(Options(dir.path()));
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().code() == StatusCode::kNotFound);
  CHECK(m.status().message() ==
        dir.path() + ": no tokenizer: looked for " + dir.path() +
            "/tokenizer.json (with tokenizer_config.json beside it for the chat template); give "
            "a tokenizer.json file, or a folder holding one, with --tokenizer PATH");

  // Files of other formats are named as present but unread.
  dir.Write("tokenizer.model", "x");
  m = Model::Open(Options(dir.path()));
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().message().find("; found tokenizer.model, which braid does not read;") !=
        std::string::npos);

  // Tools that feed token ids may still open it.
  ModelOptions ids_only = Options(dir.path());
  ids_only.require_tokenizer = false;
  m = Model::Open(ids_only);
  REQUIRE_MESSAGE(m.ok(), m.status().message());
  CHECK((*m)->TokenizeText("hello").empty());
}

TEST_CASE("Model::Open reads the tokenizer ModelOptions::tokenizer names") {
  test::TempDir dir;
  WriteCheckpoint(dir);
  for (const std::string& given : {kTokenizerDir, kTokenizerDir + "/tokenizer.json"}) {
    CAPTURE(given);
    ModelOptions mo = Options(dir.path());
    mo.tokenizer = given;
    auto m = Model::Open(mo);
    REQUIRE_MESSAGE(m.ok(), m.status().message());
    CHECK_FALSE((*m)->TokenizeText("hello world").empty());
    CHECK((*m)->Detokenize((*m)->TokenizeText("hello world")) == "hello world");
  }

  // A folder without tokenizer.json, and a file that is not there.
  test::TempDir empty;
  ModelOptions mo = Options(dir.path());
  mo.tokenizer = empty.path();
  auto m = Model::Open(mo);
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().message() == "tokenizer " + empty.path() + ": the folder has no tokenizer.json");
  mo.tokenizer = empty.path() + "/nope.json";
  m = Model::Open(mo);
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().message().find(empty.path() + "/nope.json: ") == 0);
}

TEST_CASE("Model::Open reads tokenizer.json beside a checkpoint") {
  test::TempDir dir;
  WriteCheckpoint(dir);
  fs::copy_file(kTokenizerDir + "/tokenizer.json", dir.path() + "/tokenizer.json");
  auto m = Model::Open(Options(dir.path()));
  REQUIRE_MESSAGE(m.ok(), m.status().message());
  CHECK_FALSE((*m)->TokenizeText("hello").empty());
}

}  // namespace
}  // namespace braid
