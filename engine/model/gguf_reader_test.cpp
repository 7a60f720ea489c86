#include "model/gguf_reader.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "model/test_files.h"

namespace braid {
namespace {

using test::GgufBuilder;
using test::PutStr;
using test::PutU32;
using test::PutU64;

// A parsed file together with the exact-size heap copy it borrows (exact size,
// so AddressSanitizer flags any read past the end).
struct Held {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

Result<Held> Parse(const std::string& b) {
  Held h;
  h.bytes.assign(b.begin(), b.end());
  auto r = GgufFile::Parse(MappedFile::Borrow("t.gguf", h.bytes.data(), h.bytes.size()));
  if (!r.ok()) return r.status();
  h.file = std::move(r).value();
  return h;
}

Status ParseStatus(const std::string& b) {
  auto r = Parse(b);
  return r.ok() ? Status::Ok() : r.status();
}

// The parse fails with `code`, and the message names the file and contains `needle`.
void ExpectError(const std::string& bytes, StatusCode code, const std::string& needle) {
  Status s = ParseStatus(bytes);
  INFO("message: ", s.message());
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == code);
  CHECK(s.message().rfind("t.gguf: ", 0) == 0);
  CHECK(s.message().find(needle) != std::string::npos);
}

// A small valid file: three KVs and two F32 tensors.
GgufBuilder Base() {
  GgufBuilder g;
  g.KvString("general.architecture", "llama");
  g.KvU32("llama.block_count", 2);
  g.KvF32("llama.rope.freq_base", 10000.0f);
  g.AddTensor("a", 0, {4, 2}, 0x11);
  g.AddTensor("b", 0, {3}, 0x22);
  return g;
}

std::string U32(uint32_t v) {
  std::string b;
  PutU32(&b, v);
  return b;
}
std::string U64(uint64_t v) {
  std::string b;
  PutU64(&b, v);
  return b;
}
std::string Str(const std::string& s) {
  std::string b;
  PutStr(&b, s);
  return b;
}

// A file with no tensors whose single KV is `key`, `type`, then raw `value` bytes.
std::string OneKv(const std::string& key, uint32_t type, const std::string& value) {
  GgufBuilder g;
  g.KvRaw(key, type, value);
  return g.Build();
}

// ---- valid files ----------------------------------------------------------------

TEST_CASE("GGUF: metadata of every type round-trips with typed getters") {
  GgufBuilder g;
  g.Kv<uint8_t>("u8", test::kTU8, 200);
  g.Kv<int8_t>("i8", test::kTI8, -5);
  g.Kv<uint16_t>("u16", test::kTU16, 60000);
  g.Kv<int16_t>("i16", test::kTI16, -30000);
  g.Kv<uint32_t>("u32", test::kTU32, 4000000000u);
  g.Kv<int32_t>("i32", test::kTI32, -2000000000);
  g.Kv<float>("f32", test::kTF32, 1.5f);
  g.Kv<uint8_t>("bool", test::kTBool, 1);
  g.KvString("str", "h\xc3\xa9llo");
  g.Kv<uint64_t>("u64", test::kTU64, (uint64_t{1} << 63) + 5);
  g.Kv<int64_t>("i64", test::kTI64, -(int64_t{1} << 40));
  g.Kv<double>("f64", test::kTF64, 2.25);
  g.KvArray<uint8_t>("arr.u8", test::kTU8, {1, 2, 3});
  g.KvArray<int32_t>("arr.i32", test::kTI32, {-1, 7});
  g.KvArray<float>("arr.f32", test::kTF32, {0.5f});
  g.KvArray<uint8_t>("arr.bool", test::kTBool, {1, 0});
  g.KvArray<uint64_t>("arr.u64", test::kTU64, {~uint64_t{0}});
  g.KvArray<int16_t>("arr.empty", test::kTI16, {});
  g.KvStrings("arr.str", {"a", "", "bc"});
  auto h = Parse(g.Build());
  REQUIRE_MESSAGE(h.ok(), h.status().message());
  const GgufFile& f = *h->file;
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.metadata().size() == 19);
  CHECK(f.tensors().empty());

  CHECK(f.GetUInt("u8").value() == 200);
  CHECK(f.GetInt("i8").value() == -5);
  CHECK(f.GetUInt("u16").value() == 60000);
  CHECK(f.GetInt("i16").value() == -30000);
  CHECK(f.GetUInt("u32").value() == 4000000000u);
  CHECK(f.GetInt("u32").value() == 4000000000);
  CHECK(f.GetInt("i32").value() == -2000000000);
  CHECK(f.GetFloat("f32").value() == 1.5);
  CHECK(f.GetFloat("i32").value() == -2e9);
  CHECK(f.GetFloat("u8").value() == 200.0);
  CHECK(f.GetBool("bool").value());
  CHECK(f.GetString("str").value() == "h\xc3\xa9llo");
  CHECK(f.GetUInt("u64").value() == (uint64_t{1} << 63) + 5);
  CHECK(f.GetInt("i64").value() == -(int64_t{1} << 40));
  CHECK(f.GetFloat("f64").value() == 2.25);
  CHECK(f.GetIntArray("arr.u8").value() == std::vector<int64_t>{1, 2, 3});
  CHECK(f.GetIntArray("arr.i32").value() == std::vector<int64_t>{-1, 7});
  CHECK(f.GetFloatArray("arr.i32").value() == std::vector<double>{-1.0, 7.0});
  CHECK(f.GetFloatArray("arr.f32").value() == std::vector<double>{0.5});
  CHECK(f.GetIntArray("arr.empty").value().empty());
  CHECK(f.GetStringArray("arr.str").value() == std::vector<std::string>{"a", "", "bc"});
  const GgufValue* b = f.Find("arr.bool");
  REQUIRE(b != nullptr);
  CHECK(b->type == GgufType::kArray);
  CHECK(b->elem_type == GgufType::kBool);
  CHECK(std::get<std::vector<bool>>(b->value) == std::vector<bool>{true, false});
  CHECK(f.Find("u16")->type == GgufType::kU16);
  CHECK(f.Find("nope") == nullptr);

  // Errors: absent keys are NotFound, wrong types and values that do not fit
  // are InvalidArgument naming the key and the stored type.
  auto err = [](const Status& s, StatusCode code, const std::string& needle) {
    INFO("message: ", s.message());
    CHECK(s.code() == code);
    CHECK(s.message().rfind("t.gguf: ", 0) == 0);
    CHECK(s.message().find(needle) != std::string::npos);
  };
  err(f.GetUInt("nope").status(), StatusCode::kNotFound, "key 'nope' not found");
  err(f.GetUInt("str").status(), StatusCode::kInvalidArgument, "key 'str' has type string");
  err(f.GetUInt("i8").status(), StatusCode::kInvalidArgument, "-5 does not fit");
  err(f.GetInt("u64").status(), StatusCode::kInvalidArgument, "does not fit");
  err(f.GetFloat("bool").status(), StatusCode::kInvalidArgument, "has type bool");
  err(f.GetBool("u8").status(), StatusCode::kInvalidArgument, "has type u8");
  err(f.GetString("arr.str").status(), StatusCode::kInvalidArgument, "array of string");
  err(f.GetStringArray("arr.i32").status(), StatusCode::kInvalidArgument, "array of i32");
  err(f.GetIntArray("arr.f32").status(), StatusCode::kInvalidArgument, "array of f32");
  err(f.GetIntArray("arr.u64").status(), StatusCode::kInvalidArgument, "does not fit");
  err(f.GetFloatArray("arr.str").status(), StatusCode::kInvalidArgument, "array of string");
  err(f.GetIntArray("u8").status(), StatusCode::kInvalidArgument, "has type u8");
}

TEST_CASE("GGUF: tensors of every supported type round-trip with their data") {
  struct Case {
    const char* name;
    uint32_t type;
    std::vector<uint64_t> ne;
    size_t nbytes;
  };
  const std::vector<Case> cases = {
      {"f32", 0, {3, 2}, 24},    {"f16", 1, {5}, 10},
      {"q4_0", 2, {64, 2}, 72},  {"q4_1", 3, {32}, 20},
      {"q8_0", 8, {32, 3}, 102}, {"q4_k", 12, {256}, 144},
      {"q6_k", 14, {512}, 420},  {"bf16", 30, {7, 1, 1, 2}, 28},
  };
  for (uint32_t version : {2u, 3u}) {
    GgufBuilder g;
    g.version = version;
    g.KvString("general.name", "x");
    uint8_t fill = 1;
    for (const Case& c : cases) g.AddTensor(c.name, c.type, c.ne, fill++);
    const std::string bytes = g.Build();
    auto h = Parse(bytes);
    REQUIRE_MESSAGE(h.ok(), h.status().message());
    const GgufFile& f = *h->file;
    CHECK(f.version() == version);
    REQUIRE(f.tensors().size() == cases.size());
    const uint8_t* base = h->bytes.data();
    const uint8_t* prev_end = nullptr;
    for (size_t i = 0; i < cases.size(); ++i) {
      const TensorInfo* t = f.FindTensor(cases[i].name);
      REQUIRE(t != nullptr);
      CHECK(&f.tensors()[i] == t);
      CHECK(static_cast<uint32_t>(t->type) == cases[i].type);
      CHECK(t->shape == std::vector<int64_t>(cases[i].ne.begin(), cases[i].ne.end()));
      CHECK(t->nbytes == cases[i].nbytes);
      const uint8_t* d = static_cast<const uint8_t*>(t->data);
      CHECK((d - base) % 32 == 0);
      CHECK(d + t->nbytes <= base + h->bytes.size());
      if (prev_end != nullptr) CHECK(d >= prev_end);
      prev_end = d + t->nbytes;
      CHECK(d[0] == i + 1);
      CHECK(d[t->nbytes - 1] == i + 1);
    }
    CHECK(f.FindTensor("missing") == nullptr);
  }
}

TEST_CASE("GGUF: general.alignment moves tensor data") {
  GgufBuilder g;
  g.alignment = 64;
  g.KvU32("general.alignment", 64);
  g.AddTensor("a", 0, {3}, 7);
  g.AddTensor("b", 0, {5}, 9);
  auto h = Parse(g.Build());
  REQUIRE_MESSAGE(h.ok(), h.status().message());
  CHECK(h->file->alignment() == 64);
  const auto* a = static_cast<const uint8_t*>(h->file->FindTensor("a")->data);
  const auto* b = static_cast<const uint8_t*>(h->file->FindTensor("b")->data);
  CHECK((a - h->bytes.data()) % 64 == 0);
  CHECK(b - a == 64);
  CHECK(b[0] == 9);
}

TEST_CASE("GGUF: tensors stored out of order are accepted when they do not overlap") {
  GgufBuilder g = Base();
  g.tensors()[0].offset = 32;  // a: 32 bytes at 32
  g.tensors()[1].offset = 0;   // b: 12 bytes at 0
  auto h = Parse(g.Build());
  REQUIRE_MESSAGE(h.ok(), h.status().message());
  CHECK(static_cast<const uint8_t*>(h->file->FindTensor("a")->data)[0] == 0x11);
}

TEST_CASE("GGUF: Open maps a file from disk and names missing files") {
  test::TempDir dir;
  const std::string path = dir.Write("m.gguf", Base().Build());
  auto f = GgufFile::Open(path);
  REQUIRE_MESSAGE(f.ok(), f.status().message());
  CHECK(f.value()->path() == path);
  CHECK(f.value()->GetUInt("llama.block_count").value() == 2);
  CHECK(static_cast<const uint8_t*>(f.value()->FindTensor("b")->data)[2] == 0x22);

  auto missing = GgufFile::Open(dir.path() + "/absent.gguf");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find("absent.gguf") != std::string::npos);
  auto directory = GgufFile::Open(dir.path());
  CHECK_FALSE(directory.ok());
  const std::string empty = dir.Write("empty.gguf", "");
  auto e = GgufFile::Open(empty);
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().rfind(empty + ": ", 0) == 0);
}

// ---- truncation ---------------------------------------------------------------------

TEST_CASE("GGUF: every truncation of a valid file fails cleanly") {
  GgufBuilder g = Base();
  g.KvStrings("tokenizer.ggml.tokens", {"a", "bb"});
  g.KvArray<int32_t>("tokenizer.ggml.token_type", test::kTI32, {1, 3});
  g.Kv<uint8_t>("tokenizer.ggml.add_bos_token", test::kTBool, 0);
  const std::string full = g.Build();
  REQUIRE(ParseStatus(full).ok());
  int failures = 0;
  for (size_t n = 0; n < full.size(); ++n) {
    Status s = ParseStatus(full.substr(0, n));
    INFO("prefix ", n, ": ", s.message());
    CHECK_FALSE(s.ok());
    CHECK(s.message().rfind("t.gguf: ", 0) == 0);
    failures += !s.ok();
  }
  CHECK(failures == static_cast<int>(full.size()));
}

// ---- header -------------------------------------------------------------------------

TEST_CASE("GGUF: bad magic and versions are rejected") {
  std::string b = Base().Build();
  std::string wrong = b;
  wrong[3] = 'G';
  ExpectError(wrong, StatusCode::kCorruption, "magic is 'GGUG', expected 'GGUF'");
  ExpectError("GG", StatusCode::kCorruption, "too short");
  ExpectError("", StatusCode::kCorruption, "not a GGUF file");
  ExpectError("GGUF", StatusCode::kCorruption, "truncated: version");
  for (uint32_t v : {0u, 1u, 4u, 0xFFFFFFFFu}) {
    GgufBuilder g = Base();
    g.version = v;
    ExpectError(g.Build(), StatusCode::kUnsupported,
                "GGUF version " + std::to_string(v) + " is not supported");
  }
  GgufBuilder swapped = Base();
  swapped.version = 0x03000000;  // version 3 written big-endian
  ExpectError(swapped.Build(), StatusCode::kUnsupported, "byte-swapped");
}

TEST_CASE("GGUF: counts larger than the file are rejected before allocation") {
  GgufBuilder g = Base();
  g.tensor_count = uint64_t{1} << 60;
  ExpectError(g.Build(), StatusCode::kCorruption, "tensor count 1152921504606846976 cannot fit");
  GgufBuilder k = Base();
  k.kv_count = ~uint64_t{0};
  ExpectError(k.Build(), StatusCode::kCorruption, "metadata count");
  GgufBuilder more = Base();
  more.kv_count = 4;  // one more than present: the tensor infos are read as a KV
  CHECK_FALSE(ParseStatus(more.Build()).ok());
}

// ---- metadata ------------------------------------------------------------------------

TEST_CASE("GGUF: bad strings are rejected") {
  ExpectError(OneKv("k", test::kTString, U64(1000) + "abc"), StatusCode::kCorruption,
              "string value of 'k' length 1000 exceeds the 3 bytes left");
  ExpectError(OneKv("k", test::kTString, U64((uint64_t{1} << 30) + 1) + "abc"),
              StatusCode::kCorruption, "exceeds the limit of 2^30 bytes");
  ExpectError(OneKv("k", test::kTString, U64(~uint64_t{0}) + "abcdefgh"), StatusCode::kCorruption,
              "exceeds the limit");
  // A key whose length runs past the end.
  GgufBuilder g;
  g.kv_count = 1;
  ExpectError(g.Build() + U64(64) + std::string(20, 'k'), StatusCode::kCorruption,
              "metadata key 0 length 64 exceeds the 20 bytes left");
}

TEST_CASE("GGUF: empty and duplicate keys are rejected") {
  ExpectError(OneKv("", test::kTU32, U32(1)), StatusCode::kCorruption, "metadata key 0 is empty");
  GgufBuilder g;
  g.KvU32("dup", 1);
  g.KvU32("dup", 2);
  ExpectError(g.Build(), StatusCode::kCorruption, "duplicate metadata key 'dup'");
}

TEST_CASE("GGUF: unknown value types, bad bools and nested arrays are rejected") {
  ExpectError(OneKv("k", 13, U32(0)), StatusCode::kUnsupported,
              "key 'k' has unknown value type 13");
  ExpectError(OneKv("k", 0xFFFFFFFF, U32(0)), StatusCode::kUnsupported, "unknown value type");
  ExpectError(OneKv("k", test::kTBool, "\x02"), StatusCode::kCorruption,
              "key 'k' has bool value 2, expected 0 or 1");
  ExpectError(OneKv("k", test::kTArray, U32(test::kTBool) + U64(2) + "\x01\x05"),
              StatusCode::kCorruption, "key 'k[1]' has bool value 5");
  ExpectError(OneKv("k", test::kTArray, U32(test::kTArray) + U64(1) + U32(test::kTU8) + U64(0)),
              StatusCode::kUnsupported, "array 'k' holds nested arrays");
  ExpectError(OneKv("k", test::kTArray, U32(77) + U64(0)), StatusCode::kUnsupported,
              "array 'k' has unknown element type 77");
}

TEST_CASE("GGUF: array lengths are checked against overflow and the bytes left") {
  // 2^61 u64 elements: count * 8 wraps to 0 in 64 bits.
  ExpectError(OneKv("k", test::kTArray, U32(test::kTU64) + U64(uint64_t{1} << 61) + U64(0)),
              StatusCode::kCorruption, "over the limit of 2^30");
  ExpectError(OneKv("k", test::kTArray, U32(test::kTU32) + U64(1000) + U32(1)),
              StatusCode::kCorruption, "array 'k' of 1000 u32 elements exceeds the 4 bytes left");
  ExpectError(OneKv("k", test::kTArray, U32(test::kTString) + U64(100) + Str("a")),
              StatusCode::kCorruption, "array 'k' of 100 string elements exceeds");
  ExpectError(OneKv("k", test::kTArray, U32(test::kTString) + U64(2) + Str("a") + U64(99)),
              StatusCode::kCorruption, "element 1 of 'k' length 99 exceeds the 0 bytes left");
}

TEST_CASE("GGUF: general.alignment must be a u32 power of two") {
  for (uint32_t a : {0u, 3u, 48u, 1u << 31}) {
    GgufBuilder g = Base();
    g.KvU32("general.alignment", a);
    ExpectError(g.Build(), StatusCode::kCorruption,
                "general.alignment is " + std::to_string(a) + ", expected a power of two");
  }
  GgufBuilder i32 = Base();
  i32.Kv<int32_t>("general.alignment", test::kTI32, 32);
  ExpectError(i32.Build(), StatusCode::kCorruption, "general.alignment has type i32, expected u32");
  GgufBuilder u64 = Base();
  u64.Kv<uint64_t>("general.alignment", test::kTU64, 32);
  ExpectError(u64.Build(), StatusCode::kCorruption, "general.alignment has type u64");
}

// ---- tensor infos ---------------------------------------------------------------------

TEST_CASE("GGUF: bad tensor names are rejected") {
  GgufBuilder empty = Base();
  empty.tensors()[1].name = "";
  ExpectError(empty.Build(), StatusCode::kCorruption, "tensor 1 has an empty name");
  GgufBuilder dup = Base();
  dup.tensors()[1].name = "a";
  ExpectError(dup.Build(), StatusCode::kCorruption, "duplicate tensor name 'a'");
  GgufBuilder longname = Base();
  longname.tensors()[1].name = std::string(64, 'n');
  ExpectError(longname.Build(), StatusCode::kCorruption, "is 64 bytes, the limit is 63");
  GgufBuilder ok = Base();
  ok.tensors()[1].name = std::string(63, 'n');
  CHECK(ParseStatus(ok.Build()).ok());
}

TEST_CASE("GGUF: bad dimensions are rejected") {
  auto with_ne = [](std::vector<uint64_t> ne, uint32_t type = 0) {
    GgufBuilder g = Base();
    g.tensors()[1].ne = std::move(ne);
    g.tensors()[1].type = type;
    g.tensors()[1].write = false;
    return g.Build();
  };
  ExpectError(with_ne({}), StatusCode::kCorruption, "tensor 'b' has 0 dimensions, expected 1 to 4");
  ExpectError(with_ne({1, 1, 1, 1, 1}), StatusCode::kCorruption, "has 5 dimensions");
  ExpectError(with_ne({4, 0}), StatusCode::kCorruption, "tensor 'b' dimension 1 is 0");
  ExpectError(with_ne({uint64_t{1} << 63}), StatusCode::kCorruption, "expected a positive size");
  ExpectError(with_ne({uint64_t{1} << 32, uint64_t{1} << 32}), StatusCode::kCorruption,
              "element count overflows");
  // llama.cpp #18674: a dimension of 2^42+1 made the byte size wrap.
  ExpectError(with_ne({(uint64_t{1} << 42) + 1, uint64_t{1} << 21}), StatusCode::kCorruption,
              "element count overflows");
  // 2^62 f32 elements fit int64, their 2^64 bytes do not.
  ExpectError(with_ne({uint64_t{1} << 62}), StatusCode::kCorruption, "byte size overflows");
  ExpectError(with_ne({33}, 2), StatusCode::kCorruption,
              "row length 33 is not a multiple of the q4_0 block size 32");
}

TEST_CASE("GGUF: unsupported and removed tensor types are named") {
  auto with_type = [](uint32_t type) {
    GgufBuilder g = Base();
    g.tensors()[1].type = type;
    g.tensors()[1].ne = {256};
    g.tensors()[1].nbytes = 1024;
    return g.Build();
  };
  ExpectError(with_type(4), StatusCode::kUnsupported, "type id 4 (removed from ggml)");
  ExpectError(with_type(32), StatusCode::kUnsupported, "type id 32 (removed from ggml)");
  ExpectError(with_type(13), StatusCode::kUnsupported, "tensor 'b' has type q5_K (id 13)");
  ExpectError(with_type(16), StatusCode::kUnsupported, "type iq2_xxs (id 16)");
  ExpectError(with_type(99), StatusCode::kUnsupported, "unknown type id 99");
  ExpectError(with_type(9), StatusCode::kUnsupported, "q8_1 (id 9), an activation type");
  ExpectError(with_type(15), StatusCode::kUnsupported, "an activation type");
  ExpectError(with_type(1000), StatusCode::kUnsupported, "an activation type");
  ExpectError(with_type(1002), StatusCode::kUnsupported, "an activation type");
}

// ---- data layout --------------------------------------------------------------------------

TEST_CASE("GGUF: misaligned, overlapping and past-the-end tensor data is rejected") {
  GgufBuilder unaligned = Base();
  unaligned.tensors()[1].offset = 40;
  ExpectError(unaligned.Build(), StatusCode::kCorruption,
              "tensor 'b' data offset 40 is not a multiple of the alignment 32");

  GgufBuilder overlap = Base();
  overlap.tensors()[1].offset = 0;  // b [0, 12) inside a [0, 32)
  ExpectError(overlap.Build(), StatusCode::kCorruption, "overlaps tensor 'a'");

  GgufBuilder grown = Base();
  grown.tensors()[0].ne = {16, 2};  // a now needs 128 bytes: [0, 128) covers b at 32
  grown.tensors()[0].write = false;
  grown.tensors()[1].offset = 32;
  ExpectError(grown.Build(), StatusCode::kCorruption, "extends past end of file");

  GgufBuilder far = Base();
  far.tensors()[1].offset = uint64_t{1} << 40;
  far.tensors()[1].write = false;
  ExpectError(far.Build(), StatusCode::kCorruption,
              "tensor 'b' data [1099511627776, 1099511627788) extends past end of file");

  GgufBuilder wrap = Base();
  wrap.tensors()[1].offset = ~uint64_t{31};  // aligned, and offset + size wraps
  wrap.tensors()[1].write = false;
  ExpectError(wrap.Build(), StatusCode::kCorruption, "extends past end of file");

  std::string cut = Base().Build();
  cut.pop_back();
  ExpectError(cut, StatusCode::kCorruption, "tensor 'b' data");
  // Cut inside the padding before the data section.
  GgufBuilder g = Base();
  const std::string full = g.Build();
  const size_t data_start = full.size() - 32 - 12;
  ExpectError(full.substr(0, data_start - 1), StatusCode::kCorruption,
              "the tensor data section would start at");
}

TEST_CASE("GGUF: a file with no tensors needs no data section") {
  GgufBuilder g;
  g.KvString("general.architecture", "llama");
  auto h = Parse(g.Build());
  REQUIRE_MESSAGE(h.ok(), h.status().message());
  CHECK(h->file->tensors().empty());
}

// Writes the seed corpus of tests/fuzz/fuzz_gguf when BRAID_WRITE_FUZZ_SEEDS
// names the repository root: valid files and a few near misses.
TEST_CASE("GGUF: fuzz seeds (written only on request)") {
  const char* root = std::getenv("BRAID_WRITE_FUZZ_SEEDS");
  if (root == nullptr) return;
  const std::filesystem::path dir = std::filesystem::path(root) / "tests/fuzz/corpus/fuzz_gguf";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
  };
  write("base.gguf", Base().Build());
  test::TinyModel m;
  write("tiny_llama.gguf", test::TinyGguf(m).Build());
  GgufBuilder types;
  types.KvU32("general.alignment", 64);
  types.alignment = 64;
  types.KvArray<int32_t>("tokenizer.ggml.token_type", test::kTI32, {1, 2, 3});
  types.KvStrings("tokenizer.ggml.merges", {"a b", "c d"});
  types.Kv<double>("f64", test::kTF64, 0.5);
  uint32_t ids[] = {1, 2, 3, 8, 12, 14, 30};
  for (uint32_t id : ids) types.AddTensor("t" + std::to_string(id), id, {256}, 0x5a);
  write("types.gguf", types.Build());
  GgufBuilder overlap = Base();
  overlap.tensors()[1].offset = 0;
  write("overlap.gguf", overlap.Build());
}

}  // namespace
}  // namespace braid
