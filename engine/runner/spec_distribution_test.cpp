// Speculative sampling keeps the target's distribution: on a small-vocabulary
// model (tests/fixtures/models/llama_tiny, 512 tokens) with a draft made of
// its first layer, thousands of seeded requests through the serving engine
// check every draft guess, and Pearson's chi-square test compares the tokens
// drawn at the guessed positions with the target's own softmax there.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace braid {
namespace {

const std::string kTiny = std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/models/llama_tiny";
constexpr float kTemperature = 0.6f;

// The target's distribution of the token after `context` at kTemperature.
std::vector<double> TargetProbs(Model& m, const std::vector<int32_t>& context) {
  auto seq = m.NewSequence();
  std::vector<float> logits;
  REQUIRE(seq->Eval(context, &logits, false).ok());
  const float top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - top) / kTemperature);
  for (double& x : p) x /= sum;
  return p;
}

// Pearson's statistic of `observed` draws against probabilities `p`, cells
// expecting fewer than 5 pooled; *df gets the degrees of freedom.
double ChiSquare(const std::map<int32_t, int>& observed, const std::vector<double>& p, int n,
                 int* df) {
  double stat = 0, pooled_e = 0, pooled_o = 0;
  int cells = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    const double e = p[t] * n;
    auto it = observed.find(static_cast<int32_t>(t));
    const double o = it == observed.end() ? 0 : it->second;
    if (e < 5) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pooled_e > 0) {
    stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++cells;
  }
  *df = cells - 1;
  return stat;
}

// The chi-square quantile at 1 - 0.001 (Wilson-Hilferty).
double Critical(int df) {
  const double z = 3.0902, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

TEST_CASE("speculative sampling with a draft model keeps the target's distribution") {
  ModelOptions target;
  target.path = kTiny;
  target.require_tokenizer = false;  // the fixture has none: ids only
  target.threads = 2;
  target.context = 64;
  EngineOptions o;
  o.model = target;
  o.kv_tokens = 8192;
  o.spec.kind = SpecOptions::Kind::kDraft;
  o.spec.draft_model = kTiny;  // greedy guesses: the target's own most likely tokens
  o.spec.max_tokens = 3;
  o.spec.adaptive = false;  // every guess is checked
  auto engine = Engine::Open(o);
  REQUIRE_MESSAGE(engine.ok(), engine.status().message());
  auto plain = Model::Open(target);
  REQUIRE(plain.ok());

  const std::vector<int32_t> prompt = {1, 17, 300, 42, 99, 5};
  constexpr int kRuns = 3000;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < kRuns; ++i) {
    GenerationRequest g;
    g.prompt = prompt;
    g.sampling.temperature = kTemperature;
    g.sampling.top_k = 0;
    g.sampling.top_p = 1.0f;
    g.sampling.min_p = 0.0f;
    g.sampling.max_tokens = 4;
    g.sampling.ignore_eos = true;
    g.sampling.seed = 1000 + static_cast<uint64_t>(i);
    auto h = (*engine)->Submit(g);
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  std::vector<std::vector<int32_t>> outs;
  for (auto& h : handles) {
    Completion c = h->Wait();
    REQUIRE(c.tokens.size() == 4);
    outs.push_back(c.tokens);
  }
  const EngineStats stats = (*engine)->stats();
  MESSAGE("guesses accepted: " << stats.spec_accepted << " of " << stats.spec_proposed);
  CHECK(stats.spec_proposed > kRuns);  // the guessed positions are the ones tested
  CHECK(stats.spec_accepted > 0);
  CHECK(stats.spec_accepted < stats.spec_proposed);

  // Positions 1..3 follow a first token and are guessed; at each, the draws
  // after the most frequent context are a sample from one distribution.
  for (size_t pos = 1; pos < 4; ++pos) {
    std::map<std::vector<int32_t>, int> contexts;
    for (const auto& t : outs) ++contexts[std::vector<int32_t>(t.begin(), t.begin() + pos)];
    const auto mode = std::max_element(contexts.begin(), contexts.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
    std::map<int32_t, int> observed;
    for (const auto& t : outs)
      if (std::equal(mode->first.begin(), mode->first.end(), t.begin())) ++observed[t[pos]];
    std::vector<int32_t> context = prompt;
    context.insert(context.end(), mode->first.begin(), mode->first.end());
    int df = 0;
    const double stat = ChiSquare(observed, TargetProbs(**plain, context), mode->second, &df);
    INFO("position " << pos << ": " << mode->second << " draws, " << observed.size()
                     << " distinct tokens, chi-square " << stat << " on " << df << " df");
    REQUIRE(mode->second >= 200);
    REQUIRE(df >= 2);
    CHECK(stat < Critical(df));
  }
}

}  // namespace
}  // namespace braid
