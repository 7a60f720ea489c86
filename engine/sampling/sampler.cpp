#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include "kernels/ops.h"

namespace braid {

Status SamplingParams::Validate() const {
  auto bad = [](const std::string& m) { return Status::InvalidArgument(m); };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature) || temperature > 100.0f)
    return bad("temperature must be in [0, 100], got " + std::to_string(temperature));
  if (top_k < 0) return bad("top_k must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return bad("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return bad("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return bad("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
  if (penalty_last_n < -1)
    return bad("penalty_last_n must be >= -1, got " + std::to_string(penalty_last_n));
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0f)
    return bad("frequency_penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2.0f)
    return bad("presence_penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
  if (max_tokens < 0) return bad("max_tokens must be >= 0, got " + std::to_string(max_tokens));
  if (min_tokens < 0 || min_tokens > max_tokens)
    return bad("min_tokens must be in [0, max_tokens], got " + std::to_string(min_tokens));
  for (const std::string& s : stop)
    if (s.empty()) return bad("stop strings must not be empty");
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

bool Sampler::greedy() const {
  return params_.temperature <= 0.0f && params_.repetition_penalty == 1.0f &&
         params_.frequency_penalty == 0.0f && params_.presence_penalty == 0.0f;
}

int32_t Sampler::Argmax(std::span<const float> logits) {
  return static_cast<int32_t>(kernels::Argmax(logits.data(), static_cast<int64_t>(logits.size())));
}

bool Sampler::AllFinite(std::span<const float> logits) {
  // On the bits: a float is NaN or infinite exactly when its exponent bits
  // are all ones. An OR over integers vectorizes (a float compare chain with
  // std::isfinite does not without -ffast-math, which would also assume it
  // away); one pass over a row costs microseconds next to the forward pass.
  uint32_t bad = 0;
  for (float x : logits) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

Status Sampler::NonFiniteError(int64_t position) {
  return Status::Internal("the model produced non-finite logits (NaN or Inf) at position " +
                          std::to_string(position) +
                          "; its weights hold NaN/Inf values or its activations overflow");
}

void Sampler::ApplyPenalties(std::span<float> logits, std::span<const int32_t> history) const {
  const bool any = params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                   params_.presence_penalty != 0.0f;
  if (!any || params_.penalty_last_n == 0 || history.empty()) return;
  size_t window = params_.penalty_last_n < 0
                      ? history.size()
                      : std::min(history.size(), static_cast<size_t>(params_.penalty_last_n));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - window; i < history.size(); ++i) counts[history[i]]++;
  for (const auto& [id, count] : counts) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
    float& l = logits[id];
    // CTRL penalty: shrink positive logits, push negative ones further down.
    if (params_.repetition_penalty != 1.0f)
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    l -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
  }
}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> history) {
  ApplyPenalties(logits, history);
  if (params_.temperature <= 0.0f) return Argmax(logits);

  // Candidates sorted by logit, descending; top-k bounds the sort.
  const size_t n = logits.size();
  size_t k = params_.top_k > 0 ? std::min(n, static_cast<size_t>(params_.top_k)) : n;
  candidates_.resize(n);
  for (size_t i = 0; i < n; ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(), by_logit);
  candidates_.resize(k);
  return Draw();
}

int Sampler::top_candidates() const {
  if (greedy()) return 1;
  const bool penalties = params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                         params_.presence_penalty != 0.0f;
  return penalties ? 0 : params_.top_k;
}

int32_t Sampler::SampleTop(std::span<const float> values, std::span<const int32_t> ids) {
  if (params_.temperature <= 0.0f) return ids[0];
  const size_t k = std::min(values.size(), static_cast<size_t>(params_.top_k));
  candidates_.resize(k);
  for (size_t i = 0; i < k; ++i) candidates_[i] = {values[i], ids[i]};
  return Draw();
}

int32_t Sampler::Draw() {
  const size_t k = candidates_.size();

  // Probabilities at temperature 1 for the truncation rules (as llama.cpp).
  const float max_logit = candidates_[0].first;
  std::vector<float> p(k);
  double sum = 0.0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp(candidates_[i].first - max_logit);
  for (float& x : p) x = static_cast<float>(x / sum);

  // min-p: keep tokens with p >= min_p * p_max.
  size_t keep = k;
  if (params_.min_p > 0.0f) {
    const float floor = params_.min_p * p[0];
    keep = 1;
    while (keep < k && p[keep] >= floor) ++keep;
  }
  // top-p: smallest prefix whose mass reaches top_p.
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    size_t i = 0;
    for (; i < keep; ++i) {
      mass += p[i];
      if (mass >= params_.top_p) break;
    }
    keep = std::min(keep, i + 1);
  }

  // Temperature, then draw.
  std::vector<double> w(keep);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i)
    total += w[i] = std::exp((candidates_[i].first - max_logit) / params_.temperature);
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= w[i];
    if (r <= 0.0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace braid
