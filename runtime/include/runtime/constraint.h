// Regex-constrained decoding for callers outside the runtime (the HTTP API's
// response_format): a compiled pattern and, per request, a logits processor
// that masks every token whose bytes cannot continue a match and allows
// end-of-generation only where the output so far is a whole match.
//
// The pattern syntax and the bounds on patterns from outside are those of
// the runtime's `regex` outputs (runtime/exec/regex_dfa.h): literals, `.`,
// classes, `* + ? {m} {m,} {m,n}`, `|`, groups, `\d \w \s` and escaped
// punctuation; matching is anchored at both ends. Compile errors name the
// bound or the pattern offset ("regex: unbalanced ')' at 4").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "engine/model.h"
#include "engine/status.h"

namespace braid::rt {

class RegexDfa;

// What GenerationRequest::logits_processor takes: the tokens generated so
// far and the next token's logits [n_vocab], lowered in place.
using LogitsProcessor =
    std::function<void(std::span<const int32_t> generated, std::span<float> logits)>;

// A compiled pattern. Immutable; copies share the automaton; safe to share
// between threads.
class RegexConstraint {
 public:
  // Errors: InvalidArgument (syntax, or a bound on size or work exceeded).
  static Result<RegexConstraint> Compile(std::string_view pattern);

  // True when the whole of `text` matches.
  bool FullMatch(std::string_view text) const;
  size_t num_states() const;
  // A processor for one request (it keeps that request's walk through the
  // automaton, so requests never share one). `tokenizer` gives each token's
  // bytes (a table built once per Model and kept for the process; the
  // processor holds no reference to the model). It runs on the engine thread.
  LogitsProcessor NewProcessor(const Model& tokenizer) const;

 private:
  explicit RegexConstraint(std::shared_ptr<const RegexDfa> dfa) : dfa_(std::move(dfa)) {}
  std::shared_ptr<const RegexDfa> dfa_;
};

}  // namespace braid::rt
