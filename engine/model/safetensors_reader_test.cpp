#include "model/safetensors_reader.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "model/test_files.h"

namespace braid {
namespace {

using test::SafetensorsBuilder;

struct Held {
  std::vector<uint8_t> bytes;  // exact size, so ASan flags reads past the end
  std::unique_ptr<SafetensorsFile> file;
};

Result<Held> Parse(const std::string& b) {
  Held h;
  h.bytes.assign(b.begin(), b.end());
  auto r =
      SafetensorsFile::Parse(MappedFile::Borrow("m.safetensors", h.bytes.data(), h.bytes.size()));
  if (!r.ok()) return r.status();
  h.file = std::move(r).value();
  return h;
}

Status ParseStatus(const std::string& b) {
  auto r = Parse(b);
  return r.ok() ? Status::Ok() : r.status();
}

void ExpectError(const std::string& bytes, StatusCode code, const std::string& needle) {
  Status s = ParseStatus(bytes);
  INFO("message: ", s.message());
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == code);
  CHECK(s.message().rfind("m.safetensors: ", 0) == 0);
  CHECK(s.message().find(needle) != std::string::npos);
}

// A file whose header is `json` followed by `data_size` zero bytes.
std::string RawFile(const std::string& json, size_t data_size = 0) {
  std::string b;
  test::PutU64(&b, json.size());
  return b + json + std::string(data_size, '\0');
}

// `entry` is the JSON object for one tensor named "w".
std::string OneTensor(const std::string& entry, size_t data_size = 64) {
  return RawFile("{\"w\":" + entry + "}", data_size);
}

SafetensorsBuilder Base() {
  SafetensorsBuilder s;
  s.extra_header_fields = "\"__metadata__\":{\"format\":\"pt\"},";
  s.AddTensor("w", "F32", {2, 3}, 0x11);
  s.AddTensor("h", "F16", {4}, 0x22);
  s.AddTensor("b", "BF16", {1, 2, 3}, 0x33);
  s.AddTensor("scalar", "F32", {}, 0x44);
  return s;
}

TEST_CASE("safetensors: a valid file round-trips with GGUF-order shapes") {
  SafetensorsBuilder s = Base();
  const std::string header = s.Header();
  auto h = Parse(s.Build());
  REQUIRE_MESSAGE(h.ok(), h.status().message());
  const SafetensorsFile& f = *h->file;
  REQUIRE(f.tensors().size() == 4);
  CHECK(f.metadata().at("format") == "pt");
  const uint8_t* data = h->bytes.data() + 8 + header.size();
  const TensorInfo* w = f.FindTensor("w");
  REQUIRE(w != nullptr);
  CHECK(w->type == kernels::DType::kF32);
  CHECK(w->shape == std::vector<int64_t>{3, 2});
  CHECK(w->nbytes == 24);
  CHECK(w->data == data);
  const TensorInfo* hh = f.FindTensor("h");
  CHECK(hh->type == kernels::DType::kF16);
  CHECK(hh->shape == std::vector<int64_t>{4});
  CHECK(hh->data == data + 24);
  CHECK(static_cast<const uint8_t*>(hh->data)[7] == 0x22);
  const TensorInfo* b = f.FindTensor("b");
  CHECK(b->type == kernels::DType::kBF16);
  CHECK(b->shape == std::vector<int64_t>{3, 2, 1});
  CHECK(b->elements() == 6);
  const TensorInfo* sc = f.FindTensor("scalar");
  CHECK(sc->shape.empty());
  CHECK(sc->nbytes == 4);
  CHECK(static_cast<const uint8_t*>(sc->data)[3] == 0x44);
  CHECK(f.FindTensor("__metadata__") == nullptr);
  CHECK(f.FindTensor("nope") == nullptr);
}

TEST_CASE("safetensors: zero-element tensors are accepted") {
  SafetensorsBuilder s;
  s.AddTensor("a", "F32", {2});
  s.AddTensor("empty", "F16", {0, 4});
  s.AddTensor("c", "F32", {1});
  auto h = Parse(s.Build());
  REQUIRE_MESSAGE(h.ok(), h.status().message());
  CHECK(h->file->FindTensor("empty")->nbytes == 0);
  CHECK(h->file->FindTensor("empty")->shape == std::vector<int64_t>{4, 0});
}

TEST_CASE("safetensors: every truncation of a valid file fails cleanly") {
  const std::string full = Base().Build();
  for (size_t n = 0; n < full.size(); ++n) {
    Status s = ParseStatus(full.substr(0, n));
    INFO("prefix ", n, ": ", s.message());
    CHECK_FALSE(s.ok());
    CHECK(s.message().rfind("m.safetensors: ", 0) == 0);
  }
}

TEST_CASE("safetensors: header length is checked against the limit and the file") {
  ExpectError("1234567", StatusCode::kCorruption, "too short for the 8-byte");
  std::string huge;
  test::PutU64(&huge, 100'000'001);
  ExpectError(huge + "{}", StatusCode::kCorruption,
              "header length 100000001 exceeds the 100,000,000-byte limit");
  std::string big;
  test::PutU64(&big, 1000);
  ExpectError(big + "{\"a\":1}", StatusCode::kCorruption,
              "header length 1000 exceeds the 7 bytes after the length field");
  std::string wrapped;
  test::PutU64(&wrapped, ~uint64_t{0});
  ExpectError(wrapped + "{}", StatusCode::kCorruption, "exceeds the 100,000,000-byte limit");
  ExpectError(RawFile(""), StatusCode::kCorruption, "header does not start with '{'");
  ExpectError(RawFile("[1, 2]"), StatusCode::kCorruption, "header does not start with '{'");
  ExpectError(RawFile(" {}"), StatusCode::kCorruption, "header does not start with '{'");
}

TEST_CASE("safetensors: malformed JSON, deep nesting and duplicate keys are rejected") {
  ExpectError(RawFile("{\"w\": }"), StatusCode::kCorruption, "invalid JSON at byte");
  ExpectError(RawFile("{}x"), StatusCode::kCorruption, "invalid JSON");
  ExpectError(RawFile("{\"a\":\"\xff\"}"), StatusCode::kCorruption, "invalid JSON");
  ExpectError(RawFile("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
              StatusCode::kCorruption, "nesting deeper than 64");
  SafetensorsBuilder dup;
  dup.AddTensor("w", "F32", {1});
  dup.AddTensor("w", "F32", {1});
  ExpectError(dup.Build(), StatusCode::kCorruption, "duplicate key 'w'");
  ExpectError(
      OneTensor("{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}"),
      StatusCode::kCorruption, "duplicate key 'dtype'");
}

TEST_CASE("safetensors: malformed tensor entries are rejected") {
  ExpectError(OneTensor("[1]"), StatusCode::kCorruption, "tensor 'w' entry is not an object");
  ExpectError(OneTensor("{\"shape\":[1],\"data_offsets\":[0,4]}"), StatusCode::kCorruption,
              "tensor 'w' has no string 'dtype'");
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}"),
              StatusCode::kCorruption, "no array 'shape'");
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}"),
              StatusCode::kCorruption, "shape holds something other than a non-negative integer");
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}"),
              StatusCode::kCorruption, "non-negative integer");
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}"),
              StatusCode::kCorruption, "'data_offsets' is not a pair");
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}"),
              StatusCode::kCorruption, "'data_offsets' is not a pair");
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e3]}"),
              StatusCode::kCorruption, "'data_offsets' is not a pair");
  ExpectError(RawFile("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
              StatusCode::kCorruption, "empty name");
  ExpectError(RawFile("{\"__metadata__\":[1]}"), StatusCode::kCorruption,
              "__metadata__ is not an object");
  ExpectError(RawFile("{\"__metadata__\":{\"k\":1}}"), StatusCode::kCorruption,
              "__metadata__ value for 'k' is not a string");
}

TEST_CASE("safetensors: unsupported dtypes name the tensor and the dtype") {
  ExpectError(OneTensor("{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}"),
              StatusCode::kUnsupported, "tensor 'w' has dtype I64, which is not supported");
  ExpectError(OneTensor("{\"dtype\":\"F8_E5M2\",\"shape\":[1],\"data_offsets\":[0,1]}"),
              StatusCode::kUnsupported, "dtype F8_E5M2");
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}"),
              StatusCode::kUnsupported, "has 9 dimensions");
}

TEST_CASE("safetensors: shape products that overflow are rejected") {
  ExpectError(
      OneTensor("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,0]}"),
      StatusCode::kCorruption, "element count overflows");
  ExpectError(
      OneTensor("{\"dtype\":\"F32\",\"shape\":[0,9223372036854775807,2],\"data_offsets\":[0,0]}"),
      StatusCode::kCorruption, "element count overflows");
  ExpectError(
      OneTensor("{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}"),
      StatusCode::kCorruption, "byte size overflows");
}

TEST_CASE("safetensors: data_offsets must be ordered, inside the data and match the size") {
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}"),
              StatusCode::kCorruption, "data_offsets [8, 4) begin after end");
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[64,68]}"),
              StatusCode::kCorruption,
              "data_offsets [64, 68) extend past the end of the data (64 bytes)");
  ExpectError(OneTensor("{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,10]}"),
              StatusCode::kCorruption,
              "data_offsets [0, 10) hold 10 bytes, but F32 [3, 4] needs 48");
  ExpectError(
      OneTensor("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}"),
      StatusCode::kCorruption, "extend past the end");
  SafetensorsBuilder overlap;
  overlap.AddTensor("a", "F32", {4});
  overlap.AddTensor("b", "F32", {4});
  overlap.tensors()[1].begin = 8;
  overlap.tensors()[1].end = 24;
  ExpectError(overlap.Build(), StatusCode::kCorruption,
              "tensor 'b' data_offsets [8, 24) overlap tensor 'a' [0, 16)");
}

TEST_CASE("CheckJsonText accepts plain JSON and names what is wrong") {
  CHECK(CheckJsonText("x", "{\"a\":[1,2,{\"b\":null}],\"c\":{\"a\":1}}").ok());
  Status dup = CheckJsonText("x", "{\"a\":{\"k\":1,\"k\":2}}");
  CHECK(dup.message() == "x: duplicate key 'k'");
  CHECK(CheckJsonText("x", "[[[]]]", 3).ok());
  CHECK(CheckJsonText("x", "[[[[]]]]", 3).message() == "x: JSON nesting deeper than 3");
  CHECK(CheckJsonText("x", "").code() == StatusCode::kCorruption);
}

// ---- sharded checkpoints ------------------------------------------------------------

struct Shards {
  test::TempDir dir;
  std::string index;
};

void WriteShards(Shards* s, const std::string& weight_map) {
  SafetensorsBuilder a;
  a.AddTensor("x", "F32", {2}, 1);
  a.AddTensor("y", "F16", {3}, 2);
  SafetensorsBuilder b;
  b.AddTensor("z", "BF16", {2, 2}, 3);
  s->dir.Write("model-00001-of-00002.safetensors", a.Build());
  s->dir.Write("model-00002-of-00002.safetensors", b.Build());
  s->index = s->dir.Write("model.safetensors.index.json",
                          "{\"metadata\":{\"total_size\":24},\"weight_map\":" + weight_map + "}");
}

TEST_CASE("safetensors: a sharded checkpoint merges its shards") {
  Shards s;
  WriteShards(
      &s,
      "{\"x\":\"model-00001-of-00002.safetensors\",\"y\":\"model-00001-of-00002.safetensors\","
      "\"z\":\"model-00002-of-00002.safetensors\"}");
  auto ck = SafetensorsCheckpoint::Open(s.index);
  REQUIRE_MESSAGE(ck.ok(), ck.status().message());
  CHECK(ck.value()->shards().size() == 2);
  REQUIRE(ck.value()->tensors().size() == 3);
  const TensorInfo& z = ck.value()->tensors().at("z");
  CHECK(z.shape == std::vector<int64_t>{2, 2});
  CHECK(static_cast<const uint8_t*>(z.data)[7] == 3);
}

TEST_CASE("safetensors: bad indexes are rejected") {
  {
    Shards s;
    WriteShards(&s, "{\"x\":\"model-00002-of-00002.safetensors\"}");
    auto ck = SafetensorsCheckpoint::Open(s.index);
    REQUIRE_FALSE(ck.ok());
    CHECK(ck.status().message().find(s.index + ": index maps tensor 'x' to "
                                               "'model-00002-of-00002.safetensors', which does not "
                                               "contain it") == 0);
  }
  {
    Shards s;
    WriteShards(&s, "{\"x\":\"../model-00001-of-00002.safetensors\"}");
    auto ck = SafetensorsCheckpoint::Open(s.index);
    REQUIRE_FALSE(ck.ok());
    CHECK(ck.status().message().find("not a plain file name") != std::string::npos);
  }
  {
    Shards s;
    WriteShards(&s, "{\"x\":\"missing.safetensors\"}");
    auto ck = SafetensorsCheckpoint::Open(s.index);
    REQUIRE_FALSE(ck.ok());
    CHECK(ck.status().code() == StatusCode::kNotFound);
    CHECK(ck.status().message().find("missing.safetensors") != std::string::npos);
  }
  {
    Shards s;
    WriteShards(&s, "{}");
    CHECK(SafetensorsCheckpoint::Open(s.index).status().message().find("weight_map is empty") !=
          std::string::npos);
  }
  {
    Shards s;
    WriteShards(&s, "[]");
    CHECK(SafetensorsCheckpoint::Open(s.index).status().message().find("no object 'weight_map'") !=
          std::string::npos);
  }
  {
    // The same tensor stored in two shards.
    Shards s;
    SafetensorsBuilder again;
    again.AddTensor("x", "F32", {2});
    s.dir.Write("a.safetensors", again.Build());
    s.dir.Write("b.safetensors", again.Build());
    const std::string index =
        s.dir.Write("i.safetensors.index.json",
                    "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}");
    auto ck = SafetensorsCheckpoint::Open(index);
    REQUIRE_FALSE(ck.ok());
    CHECK(ck.status().message().find("tensor 'x' is also stored in another shard") !=
          std::string::npos);
  }
}

// Writes the seed corpus of tests/fuzz/fuzz_safetensors when
// BRAID_WRITE_FUZZ_SEEDS names the repository root.
TEST_CASE("safetensors: fuzz seeds (written only on request)") {
  const char* root = std::getenv("BRAID_WRITE_FUZZ_SEEDS");
  if (root == nullptr) return;
  const std::filesystem::path dir =
      std::filesystem::path(root) / "tests/fuzz/corpus/fuzz_safetensors";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
  };
  write("base.safetensors", Base().Build());
  test::TinyModel m;
  m.n_layer = 1;
  write("tiny_llama.safetensors", test::TinySafetensors(m).Build());
  write("entry.safetensors",
        OneTensor("{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]}", 12));
}

}  // namespace
}  // namespace braid
