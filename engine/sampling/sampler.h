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

  // Index of the largest logit (lowest index on ties).
  static int32_t Argmax(std::span<const float> logits);

 private:
  void ApplyPenalties(std::span<float> logits, std::span<const int32_t> history) const;

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch
};

}  // namespace braid
