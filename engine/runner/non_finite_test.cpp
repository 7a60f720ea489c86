// A model whose numbers go non-finite (NaN weights, or weights so large that
// the activations overflow) must fail its requests with an error the caller
// sees, not produce empty or arbitrary text: through the serving engine
// (generation and scoring) and through Generate().
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "model/test_files.h"
#include "sampling/sampler.h"

namespace braid {
namespace {

const std::string kTiny = std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/models/llama_tiny";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A copy of the tiny Llama checkpoint in `dir` whose F32 tensor `name` is
// filled with `value`.
void WriteTinyWith(const test::TempDir& dir, const std::string& name, float value) {
  std::string st = ReadAll(kTiny + "/model.safetensors");
  REQUIRE(st.size() > 8);
  uint64_t header_len = 0;
  std::memcpy(&header_len, st.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(st.substr(8, header_len));
  REQUIRE(header.at(name).at("dtype") == "F32");
  const uint64_t begin = header.at(name).at("data_offsets")[0];
  const uint64_t end = header.at(name).at("data_offsets")[1];
  for (uint64_t off = begin; off < end; off += 4) std::memcpy(&st[8 + header_len + off], &value, 4);
  dir.Write("model.safetensors", st);
  dir.Write("config.json", ReadAll(kTiny + "/config.json"));
}

EngineOptions Options(const std::string& path) {
  EngineOptions o;
  o.model.path = path;
  o.model.require_tokenizer = false;  // the fixture has none: ids only
  o.model.threads = 1;
  o.model.context = 64;
  o.kv_tokens = 256;
  o.max_batch_tokens = 16;
  return o;
}

GenerationRequest Greedy(int max_tokens) {
  GenerationRequest g;
  g.prompt = {1, 17, 42, 99};
  g.sampling = SamplingParams::Greedy();
  g.sampling.max_tokens = max_tokens;
  g.sampling.ignore_eos = true;
  return g;
}

TEST_CASE("Sampler::AllFinite: any NaN or infinity in a row, and nothing else") {
  std::vector<float> row(1000, 1.5f);
  row[3] = -std::numeric_limits<float>::max();
  row[4] = std::numeric_limits<float>::denorm_min();
  CHECK(Sampler::AllFinite(row));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t at : {size_t{0}, size_t{517}, size_t{999}}) {
      std::vector<float> r = row;
      r[at] = bad;
      CHECK_FALSE(Sampler::AllFinite(r));
    }
  }
  CHECK(Sampler::AllFinite({}));
}

TEST_CASE("the tiny checkpoint with finite weights generates (the control)") {
  auto e = Engine::Open(Options(kTiny));
  REQUIRE_MESSAGE(e.ok(), e.status().message());
  auto h = (*e)->Submit(Greedy(4));
  REQUIRE(h.ok());
  const Completion c = (*h)->Wait();
  CHECK(c.finish_reason == "length");
  CHECK(c.tokens.size() == 4);
}

TEST_CASE("non-finite logits fail the request with an error, in the engine and in Generate") {
  struct Case {
    const char* what;
    const char* tensor;
    float value;
  };
  // NaN weights; and an output head of the largest finite float, whose dot
  // products with the normalized hidden state overflow to infinities.
  const Case cases[] = {
      {"NaN final norm", "model.norm.weight", std::nanf("")},
      {"NaN output head", "lm_head.weight", std::nanf("")},
      {"overflowing output head", "lm_head.weight", std::numeric_limits<float>::max()}};
  for (const Case& k : cases) {
    const std::string what = k.what;
    CAPTURE(what);
    test::TempDir dir;
    WriteTinyWith(dir, k.tensor, k.value);
    auto e = Engine::Open(Options(dir.path()));
    REQUIRE_MESSAGE(e.ok(), e.status().message());

    auto h = (*e)->Submit(Greedy(4));
    REQUIRE(h.ok());
    const Completion c = (*h)->Wait();
    CHECK(c.finish_reason == "error");
    CHECK(c.error.find("non-finite logits (NaN or Inf) at position 3") != std::string::npos);
    CHECK(c.tokens.empty());

    // Scoring (how `select` ranks choices) fails the same way.
    GenerationRequest score = Greedy(0);
    score.score_choices = {{5, 6}, {7}};
    auto s = (*e)->Submit(score);
    REQUIRE(s.ok());
    const Completion sc = (*s)->Wait();
    CHECK(sc.finish_reason == "error");
    CHECK(sc.error.find("non-finite logits") != std::string::npos);

    // The failed requests released their blocks and cached none of them (the
    // gauges are refreshed at the end of the step that finished them; the
    // minute is only a bound on a hang).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((*e)->stats().kv_blocks_free != (*e)->stats().kv_blocks_total &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK((*e)->stats().kv_blocks_free == (*e)->stats().kv_blocks_total);

    auto m = Model::Open(Options(dir.path()).model);
    REQUIRE_MESSAGE(m.ok(), m.status().message());
    SamplingParams sp = SamplingParams::Greedy();
    sp.max_tokens = 4;
    const std::vector<int32_t> prompt = {1, 17, 42, 99};
    auto r = Generate(**m, prompt, sp);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("non-finite logits (NaN or Inf) at position 3") !=
          std::string::npos);
  }
}

}  // namespace
}  // namespace braid
