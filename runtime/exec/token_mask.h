// Constrained decoding for `regex` outputs: a logits processor that masks
// (-inf) every token whose bytes cannot continue a match of the output's
// pattern, and allows end-of-generation only in an accepting state.
//
// TokenTable holds each token's bytes and EOG flag, computed once per model
// (ForModel caches it). RegexMask is called on the engine thread, once per
// step of one request; it is not shared between requests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model.h"
#include "exec/regex_dfa.h"

namespace braid::rt {

struct TokenTable {
  std::vector<std::string> bytes;  // by token id
  std::vector<bool> eog;
  // The table of `model`, built on first use and kept for the process.
  static std::shared_ptr<const TokenTable> ForModel(const Model& model);
};

class RegexMask {
 public:
  RegexMask(std::shared_ptr<const RegexDfa> dfa, std::shared_ptr<const TokenTable> tokens)
      : dfa_(std::move(dfa)), tokens_(std::move(tokens)) {}
  // generated: the tokens sampled so far; logits: [n_vocab], masked in place.
  void operator()(std::span<const int32_t> generated, std::span<float> logits);
  // The DFA state after `generated` (kDead if it left the language).
  int StateAfter(std::span<const int32_t> generated);

 private:
  std::shared_ptr<const RegexDfa> dfa_;
  std::shared_ptr<const TokenTable> tokens_;
  // Incremental walk: the state after the first walked_ tokens of `generated`.
  std::vector<int32_t> walked_;
  int state_ = 0;
};

}  // namespace braid::rt
