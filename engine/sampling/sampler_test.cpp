#include "sampling/sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace braid {
namespace {

SamplingParams Plain(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

std::vector<double> Frequencies(const SamplingParams& params, std::vector<float> logits,
                                int draws) {
  Sampler s(params);
  std::vector<double> f(logits.size());
  for (int i = 0; i < draws; ++i) {
    std::vector<float> l = logits;
    f[s.Sample(l, {})] += 1.0 / draws;
  }
  return f;
}

TEST_CASE("greedy picks the argmax, lowest index on ties") {
  std::vector<float> l = {0.1f, 2.0f, 2.0f, -1.0f};
  Sampler s(SamplingParams::Greedy());
  CHECK(s.Sample(l, {}) == 1);
}

TEST_CASE("temperature 1 draws from softmax") {
  std::vector<float> logits = {1.0f, 0.0f, -1.0f, 0.5f};
  double z = 0;
  for (float x : logits) z += std::exp(x);
  auto f = Frequencies(Plain(1.0f), logits, 40000);
  for (size_t i = 0; i < logits.size(); ++i)
    CHECK(f[i] == doctest::Approx(std::exp(logits[i]) / z).epsilon(0.05));
}

TEST_CASE("temperature sharpens the distribution") {
  std::vector<float> logits = {1.0f, 0.0f};
  auto f = Frequencies(Plain(0.5f), logits, 40000);
  double p0 = std::exp(2.0) / (std::exp(2.0) + 1.0);
  CHECK(f[0] == doctest::Approx(p0).epsilon(0.03));
}

TEST_CASE("top-k, top-p and min-p truncate") {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams k2 = Plain(1.0f);
  k2.top_k = 2;
  auto f = Frequencies(k2, logits, 20000);
  CHECK(f[2] == 0.0);
  CHECK(f[3] == 0.0);
  CHECK(f[0] == doctest::Approx(0.5 / 0.8).epsilon(0.05));

  SamplingParams p = Plain(1.0f);
  p.top_p = 0.79f;  // 0.5 + 0.3 reaches it
  f = Frequencies(p, logits, 20000);
  CHECK(f[2] == 0.0);
  CHECK(f[1] > 0.3);

  SamplingParams m = Plain(1.0f);
  m.min_p = 0.2f;  // floor 0.1: drops 0.05
  f = Frequencies(m, logits, 20000);
  CHECK(f[3] == 0.0);
  CHECK(f[2] > 0.1);
}

TEST_CASE("the same seed gives the same draws") {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.7f);
  Sampler a(Plain(1.0f)), b(Plain(1.0f));
  for (int i = 0; i < 50; ++i) {
    std::vector<float> la = logits, lb = logits;
    CHECK(a.Sample(la, {}) == b.Sample(lb, {}));
  }
}

TEST_CASE("penalties change the logits of seen tokens only") {
  SamplingParams p = SamplingParams::Greedy();
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<float> logits = {4.0f, -2.0f, 3.0f};
  std::vector<int32_t> history = {0, 0, 1};
  Sampler s(p);
  // token 0: 4/2 - 2*0.5 - 0.25 = 0.75; token 1: -2*2 - 0.5 - 0.25 = -4.75; token 2 unchanged.
  CHECK(s.Sample(logits, history) == 2);
  CHECK(logits[0] == doctest::Approx(0.75f));
  CHECK(logits[1] == doctest::Approx(-4.75f));
  CHECK(logits[2] == doctest::Approx(3.0f));
}

TEST_CASE("validation names the bad field") {
  SamplingParams p;
  p.top_p = 1.5f;
  CHECK(p.Validate().message().find("top_p") != std::string::npos);
  p = SamplingParams();
  p.temperature = -1;
  CHECK(p.Validate().message().find("temperature") != std::string::npos);
  p = SamplingParams();
  p.max_tokens = -3;
  CHECK_FALSE(p.Validate().ok());
  CHECK(SamplingParams().Validate().ok());
}

TEST_CASE("SampleTop over a row's largest logits draws as Sample over the whole row") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int n = 1000;
  struct Case {
    float temperature;
    int top_k;
    float top_p, min_p;
  };
  const Case cases[] = {{0.0f, 40, 0.95f, 0.05f}, {0.8f, 40, 0.95f, 0.05f}, {1.0f, 1, 1.0f, 0.0f},
                        {1.3f, 64, 1.0f, 0.0f},   {0.5f, 7, 0.5f, 0.0f},    {2.0f, 20, 0.9f, 0.2f}};
  for (const Case& c : cases) {
    SamplingParams p;
    p.temperature = c.temperature, p.top_k = c.top_k, p.top_p = c.top_p, p.min_p = c.min_p;
    p.seed = 99;
    Sampler whole(p), top(p);
    const int k = top.top_candidates();
    REQUIRE(k == (c.temperature > 0 ? c.top_k : 1));
    const int given = std::min(64, k + 5);  // a backend may return more than asked
    for (int draw = 0; draw < 300; ++draw) {
      std::vector<float> row(n);
      for (float& x : row) x = std::round(normal(rng) * 8) / 8;  // ties happen
      std::vector<int32_t> order(n);
      for (int i = 0; i < n; ++i) order[i] = i;
      std::partial_sort(order.begin(), order.begin() + given, order.end(), [&](int a, int b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      std::vector<float> values(given);
      std::vector<int32_t> ids(order.begin(), order.begin() + given);
      for (int j = 0; j < given; ++j) values[j] = row[ids[j]];
      const int32_t want = whole.Sample(row, {});
      CHECK(top.SampleTop(values, ids) == want);
    }
  }
}

TEST_CASE("top_candidates: the whole row with penalties or no top-k bound") {
  SamplingParams p;
  CHECK(Sampler(p).top_candidates() == 40);
  p.top_k = 0;
  CHECK(Sampler(p).top_candidates() == 0);
  p.top_k = 10;
  p.repetition_penalty = 1.1f;
  CHECK(Sampler(p).top_candidates() == 0);
  CHECK(Sampler(SamplingParams::Greedy()).top_candidates() == 1);
}

}  // namespace
}  // namespace braid
