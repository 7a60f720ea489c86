// Turns a logit vector into the next token id under SamplingParams.
//
// Order (as llama.cpp's default chain): penalties on the recent window ->
// greedy if temperature == 0 -> top-k -> min-p -> top-p -> temperature ->
// draw from the renormalised distribution with a seeded RNG. One Sampler per
// sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling.h"

namespace braid {

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks a token from `logits` (modified in place by the penalties).
  // `history` is the sequence so far (prompt and generated), for penalties.
  int32_t Sample(std::span<float> logits, std::span<const int32_t> history);

  // Picks a token from a row's largest logits only: `values` descending with
  // their `ids` (ties: the lower id first), as Backend::ForwardTopK gives
  // them. The same token, and the same draw from the random stream, as
  // Sample on the whole row, provided that top_candidates() <= values.size().
  int32_t SampleTop(std::span<const float> values, std::span<const int32_t> ids);

  // True when Sample is the argmax of the raw logits (temperature 0, no
  // penalties): a backend may then pick the token where the logits are.
  bool greedy() const;
  // How many of a row's largest logits SampleTop needs (1 when greedy), or 0
  // when it needs the whole row (penalties, or no top-k bound).
  int top_candidates() const;

  // Index of the largest logit (lowest index on ties).
  static int32_t Argmax(std::span<const float> logits);

  // True when every logit is finite. A model whose weights hold NaN or Inf
  // (or whose activations overflow) yields such rows, from which sampling
  // would pick an arbitrary token; callers check the row they sample from,
  // before any logits processor may set -inf on purpose.
  static bool AllFinite(std::span<const float> logits);
  // The error a request fails with when AllFinite is false.
  static Status NonFiniteError(int64_t position);

 private:
  void ApplyPenalties(std::span<float> logits, std::span<const int32_t> history) const;
  // The truncation rules and the draw over candidates_ (sorted, top-k kept).
  int32_t Draw();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
};

}  // namespace braid
