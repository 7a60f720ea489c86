// Holds back generated text that could still become a stop string, and
// finds the first completed one. Used by Generate and the serving engine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/model.h"
#include "engine/sampling.h"

namespace braid {

// The ids of `model`'s vocabulary that end generation.
inline std::vector<int32_t> EndOfGenerationIds(const Model& model) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < model.info().n_vocab; ++id)
    if (model.IsEndOfGeneration(id)) ids.push_back(id);
  return ids;
}

// Before SamplingParams::min_tokens are generated: the tokens that would
// end the request (end-of-generation unless ignore_eos, the stop tokens)
// get -inf logits, so they are never drawn.
inline void MaskEnds(std::span<float> logits, std::span<const int32_t> eog_ids,
                     const SamplingParams& p) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  auto off = [&](int32_t id) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = kOff;
  };
  if (!p.ignore_eos)
    for (int32_t id : eog_ids) off(id);
  for (int32_t id : p.stop_tokens) off(id);
}

// Holds back text that could still become a stop string, and finds the first
// completed one.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends `text`; returns the part now safe to emit. Sets *stopped when a
  // stop string completed (the returned text then ends right before it).
  std::string Push(const std::string& text, bool* stopped) {
    pending_ += text;
    size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, pending_.find(s));
    if (first != std::string::npos) {
      *stopped = true;
      std::string out = pending_.substr(0, first);
      pending_.clear();
      return out;
    }
    size_t hold = 0;
    for (const std::string& s : stops_)
      for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k)
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
  }
  std::string Flush() { return std::exchange(pending_, {}); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

}  // namespace braid
