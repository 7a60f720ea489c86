// Sampling parameters of one generation and their validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/status.h"

namespace braid {

struct SamplingParams {
  float temperature = 0.8f;         // 0 = greedy
  int top_k = 40;                   // 0 = off
  float top_p = 0.95f;              // 1 = off
  float min_p = 0.05f;              // 0 = off; relative to the most likely token
  float repetition_penalty = 1.0f;  // 1 = off; CTRL-style divide/multiply of seen tokens' logits
  int penalty_last_n = 64;          // window for the three penalties (-1 = whole context)
  float frequency_penalty = 0.0f;   // OpenAI-style: logit -= count * f
  float presence_penalty = 0.0f;    // OpenAI-style: logit -= (count > 0) * p
  uint64_t seed = 0xB2A1D;          // sampling RNG seed
  int max_tokens = 128;             // new tokens to generate at most
  // Tokens generated before end-of-generation, stop tokens and stop strings
  // may end the request (they are masked, or not looked for, until then):
  // a label's "Summary:" followed by a newline then does not end a gen
  // with stop="\n" at once. 0..max_tokens.
  int min_tokens = 0;
  std::vector<std::string> stop;     // stop strings (not included in the output)
  std::vector<int32_t> stop_tokens;  // extra stop ids (besides the model's EOG ids)
  bool ignore_eos = false;

  static SamplingParams Greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
  // Names the first out-of-range field, e.g. "top_p must be in (0, 1], got 1.5".
  Status Validate() const;
};

}  // namespace braid
