// Speculative decoding options: which proposer guesses the next tokens and
// how many it may guess per step (engine/spec/proposer.h; the number used is
// chosen per step from measured acceptance and step cost).
#pragma once

#include <string>

#include "engine/status.h"

namespace braid {

struct SpecOptions {
  enum class Kind { kOff, kNgram, kSuffix };
  Kind kind = Kind::kOff;
  int max_tokens = 8;  // guesses per step at most
  // false: every step checks all the guesses offered (up to max_tokens),
  // whether or not they pay; for measuring acceptance, and for tests.
  bool adaptive = true;

  bool on() const { return kind != Kind::kOff; }
  const char* name() const;
};

// "off", "ngram" or "suffix", then optionally ":N" for max_tokens (1..32)
// and ":fixed" for adaptive = false, e.g. "ngram:4:fixed".
Result<SpecOptions> ParseSpecOptions(const std::string& text);

}  // namespace braid
