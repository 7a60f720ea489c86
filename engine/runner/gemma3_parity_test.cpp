// Gemma 3 270M (the real Q4_K_M weights, `scripts/fetch_model.sh gemma3`)
// against transformers in float32 (tests/fixtures/logits/gemma3_270m.json,
// from scripts/reference/make_gemma3_fixtures.py): 20 prompts, two of them
// longer than the 512-token sliding window, each with its reference top-20
// logits at the last prompt position and a 32-token greedy continuation.
//
// Exact path: the top-20 logits agree, and every continuation is identical
// except where the reference itself is a near-tie (gap < 0.01), each such
// exception printed with its gap. Fast path: the same, at the fast path's
// near-tie bar (0.1), with at most three continuations differing.
// Skipped when the model has not been fetched.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model.h"
#include "sampling/sampler.h"

namespace braid {
namespace {

const std::string kModel = std::string(BRAID_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
const std::string kFixture =
    std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/logits/gemma3_270m.json";

struct Bars {
  double logit_eps;   // relative tolerance of the reference's top-20 logits
  double tie_gap;     // a continuation may differ only where the reference gap is below
  int greedy_misses;  // continuations that may differ
};

void CheckGemma(bool exact, const Bars& bars) {
  if (!std::filesystem::exists(kModel)) {
    MESSAGE("skipped: " << kModel << " not found (run scripts/fetch_model.sh gemma3)");
    return;
  }
  ModelOptions mo;
  mo.path = kModel;
  mo.threads = 2;
  mo.cpu.exact = exact;
  mo.context = 2048;
  auto model = Model::Open(mo);
  REQUIRE_MESSAGE(model.ok(), model.status().ToString());
  std::ifstream in(kFixture);
  REQUIRE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  const int n_vocab = (*model)->info().n_vocab;
  int misses = 0, steps = 0, same_steps = 0;
  for (const auto& p : fixture["prompts"]) {
    const std::string name = p["name"];
    CAPTURE(name);
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    // The tokenizer agrees with the reference's ids (BOS included).
    CHECK((*model)->TokenizeRaw(p["text"].get<std::string>()) == ids);
    auto seq = (*model)->NewSequence();
    std::vector<float> logits;
    REQUIRE(seq->Eval(ids, &logits).ok());
    REQUIRE(static_cast<int>(logits.size()) == n_vocab);
    const auto top_ids = p["last_top_ids"].get<std::vector<int32_t>>();
    const auto top_logits = p["last_top_logits"].get<std::vector<float>>();
    for (size_t j = 0; j < top_ids.size(); ++j)
      CHECK(logits[top_ids[j]] ==
            doctest::Approx(top_logits[j]).epsilon(bars.logit_eps).scale(1.0));
    const auto gen = p["gen_ids"].get<std::vector<int32_t>>();
    const auto gaps = p["gen_gaps"].get<std::vector<float>>();
    for (size_t g = 0; g < gen.size(); ++g) {
      const int32_t id = Sampler::Argmax(logits);
      ++steps;
      if (id != gen[g]) {
        ++misses;
        MESSAGE(name << ": continuation differs at step " << g << " (reference gap " << gaps[g]
                     << ")");
        CHECK_MESSAGE(gaps[g] < bars.tie_gap, "differs where the reference has a clear winner");
        break;
      }
      ++same_steps;
      REQUIRE(seq->Eval(std::span<const int32_t>(&id, 1), &logits).ok());
    }
  }
  CHECK(misses <= bars.greedy_misses);
  MESSAGE("Gemma 3 270M " << std::string(exact ? "exact" : "fast") << ": "
                          << fixture["prompts"].size() - misses << "/" << fixture["prompts"].size()
                          << " continuations identical, " << same_steps << "/" << steps
                          << " steps checked agree");
}

TEST_CASE("Gemma 3 270M matches transformers: exact path") { CheckGemma(true, {2e-3, 1e-2, 20}); }

TEST_CASE("Gemma 3 270M matches transformers: fast path") { CheckGemma(false, {5e-2, 0.1, 3}); }

}  // namespace
}  // namespace braid
