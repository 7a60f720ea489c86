// The weight-streaming variant (kernels/stream.h) is chosen at model load:
// forced by CpuOptions::stream or BRAID_STREAM, else timed on the model's
// decode steps; ModelInfo::stream says which and how. Every variant gives the
// same logits (a prefetch changes no value).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model.h"
#include "kernels/stream.h"

namespace braid {
namespace {

const std::string kTiny = std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/models/llama_tiny";

std::unique_ptr<Model> Open(CpuOptions::Stream stream, int context = 64, int threads = 2) {
  ModelOptions mo;
  mo.path = kTiny;
  mo.require_tokenizer = false;  // the fixture has none: ids only
  mo.threads = threads;
  mo.context = context;
  mo.cpu.stream = stream;
  auto m = Model::Open(mo);
  REQUIRE_MESSAGE(m.ok(), m.status().ToString());
  return std::move(m).value();
}

std::vector<float> Logits(Model& m) {
  auto seq = m.NewSequence();
  std::vector<float> logits;
  const std::vector<int32_t> ids = {1, 5, 9, 2, 7};
  REQUIRE(seq->Eval(ids, &logits, /*all_logits=*/true).ok());
  return logits;
}

// Sets BRAID_STREAM for a scope.
struct EnvStream {
  explicit EnvStream(const char* v) { setenv("BRAID_STREAM", v, 1); }
  ~EnvStream() { unsetenv("BRAID_STREAM"); }
};

TEST_CASE("stream variant: forced by the options, the same logits either way") {
  unsetenv("BRAID_STREAM");
  auto t0 = Open(CpuOptions::Stream::kTemporal);
  CHECK(t0->info().stream == "t0 (forced)");
  CHECK(kernels::CurrentStreamVariant() == kernels::StreamVariant::kTemporal);
  const std::vector<float> a = Logits(*t0);
  auto nt = Open(CpuOptions::Stream::kNonTemporal);
  CHECK(nt->info().stream == "nt (forced)");
  CHECK(kernels::CurrentStreamVariant() == kernels::StreamVariant::kNonTemporal);
  CHECK(Logits(*nt) == a);
}

TEST_CASE("stream variant: auto times both and keeps one; BRAID_STREAM forces one") {
  unsetenv("BRAID_STREAM");
  auto m = Open(CpuOptions::Stream::kAuto);
  const std::string s = m->info().stream;
  CAPTURE(s);
  CHECK((s.rfind("nt (measured: nt ", 0) == 0 || s.rfind("t0 (measured: nt ", 0) == 0));
  CHECK(s.find("ms/token)") != std::string::npos);
  CHECK(std::string(kernels::StreamVariantName(kernels::CurrentStreamVariant())) == s.substr(0, 2));
  {
    EnvStream env("t0");
    auto f = Open(CpuOptions::Stream::kAuto);
    CHECK(f->info().stream == "t0 (forced by BRAID_STREAM)");
    CHECK(kernels::CurrentStreamVariant() == kernels::StreamVariant::kTemporal);
    // An explicit option wins over the environment.
    auto o = Open(CpuOptions::Stream::kNonTemporal);
    CHECK(o->info().stream == "nt (forced)");
  }
  {
    EnvStream env("nt");
    CHECK(Open(CpuOptions::Stream::kAuto)->info().stream == "nt (forced by BRAID_STREAM)");
  }
  {
    EnvStream env("fast");
    ModelOptions mo;
    mo.path = kTiny;
    mo.require_tokenizer = false;
    mo.threads = 2;
    auto bad = Model::Open(mo);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().message().find("BRAID_STREAM must be nt, t0 or auto, got 'fast'") !=
          std::string::npos);
  }
  {
    EnvStream env("auto");
    CHECK(Open(CpuOptions::Stream::kAuto)->info().stream.find("(measured: ") != std::string::npos);
  }
  // A measurement is kept per model size and thread count: the same again.
  CHECK(Open(CpuOptions::Stream::kAuto)->info().stream == s);
  // Too short a context to time, for a size and thread count this process has
  // not measured yet (no other test of this binary opens the model with 5
  // threads): the default, said so.
  CHECK(Open(CpuOptions::Stream::kAuto, 2, 5)->info().stream.find("nt (default") == 0);
}

TEST_CASE("stream variant: names parse both ways; nothing else does") {
  kernels::StreamVariant v;
  for (auto want : {kernels::StreamVariant::kNonTemporal, kernels::StreamVariant::kTemporal}) {
    REQUIRE(kernels::ParseStreamVariant(kernels::StreamVariantName(want), &v));
    CHECK(v == want);
  }
  CHECK_FALSE(kernels::ParseStreamVariant("", &v));
  CHECK_FALSE(kernels::ParseStreamVariant("NT", &v));
  CHECK_FALSE(kernels::ParseStreamVariant("auto", &v));
}

}  // namespace
}  // namespace braid
