// Speculative decoding options: which proposer guesses the next tokens and
// how many it may guess per step (engine/spec/proposer.h; the number used is
// chosen per step from measured acceptance and step cost).
#pragma once

#include <string>

#include "engine/status.h"

namespace braid {

struct SpecOptions {
  enum class Kind { kOff, kNgram, kSuffix, kDraft };
  Kind kind = Kind::kOff;
  // kDraft: the draft model's file (same tokenizer as the target), or empty
  // for the target's own first draft_layers layers (0: a quarter of them).
  std::string draft_model;
  int draft_layers = 0;
  int max_tokens = 8;  // guesses per step at most
  // false: every step checks all the guesses offered (up to max_tokens),
  // whether or not they pay; for measuring acceptance, and for tests.
  bool adaptive = true;

  bool on() const { return kind != Kind::kOff; }
  const char* name() const;
};

// "off", "ngram", "suffix", "draft" (the target's first quarter of layers),
// "draft=L" (its first L layers) or "draft=PATH" (a model file), then
// optionally ":N" for max_tokens (1..32) and ":fixed" for adaptive = false,
// e.g. "ngram:4:fixed", "draft=6:4".
Result<SpecOptions> ParseSpecOptions(const std::string& text);

}  // namespace braid
