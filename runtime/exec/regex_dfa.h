// A small regular-expression engine for constrained decoding: the pattern is
// parsed, built into a Thompson NFA over bytes and determinized into a DFA
// whose transitions are a 256-entry table per state. Matching is anchored at
// both ends (the whole output must match), so `^` and `$` are accepted only as
// no-ops at the very start and end.
//
// Syntax: literals, `.` (any UTF-8 character except '\n'), `[...]` and
// `[^...]` (ASCII ranges and escapes; a negated class also admits every
// non-ASCII character), `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, `|`, `( )`,
// `(?: )`, escapes `\d \w \s \D \W \S \n \t \r` and `\` before any
// punctuation. States from which no match can be reached are pruned, so a
// walk that stays off kDead can always still be completed into a match.
//
// Patterns may come from outside: Compile bounds the pattern's length (64 KiB),
// the nesting of groups and repeats (250), the NFA (50,000 states), the DFA
// (10,000 states) and the work of building it (kMaxSteps), and answers
// InvalidArgument naming the bound (with the pattern offset where there is one)
// rather than running out of stack, memory or time.
//
// Immutable after Compile; safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"

namespace braid::rt {

class RegexDfa {
 public:
  static constexpr int kDead = -1;
  // Steps of the subset construction (NFA states scanned or visited) that one
  // pattern may take: about 0.2 s of one core in a release build. Patterns for
  // constrained output take far fewer: `.{0,999}` takes 0.2M and
  // `(a|b)*a(a|b){12}`, with 8,192 DFA states, 2.2M.
  static constexpr size_t kMaxSteps = 20'000'000;

  // Errors name the pattern position: "regex: unbalanced ')' at 4".
  static Result<RegexDfa> Compile(std::string_view pattern);
  // As Compile, with the construction's steps drawn from *steps_left, which
  // several patterns share (one template's, say) so that together they stay
  // bounded. ResourceExhausted when *steps_left runs out before this pattern's
  // own kMaxSteps does.
  static Result<RegexDfa> Compile(std::string_view pattern, size_t* steps_left);

  int start() const { return 0; }
  int Next(int state, uint8_t byte) const {
    return state < 0 ? kDead : table_[static_cast<size_t>(state)][byte];
  }
  // The state after consuming `bytes` from `state` (kDead once it dies).
  int Walk(int state, std::string_view bytes) const;
  bool Accepting(int state) const { return state >= 0 && accepting_[static_cast<size_t>(state)]; }
  // True when some byte leads on from `state` (more output is possible).
  bool CanContinue(int state) const;
  bool FullMatch(std::string_view text) const { return Accepting(Walk(start(), text)); }
  size_t num_states() const { return table_.size(); }

 private:
  // Compile under a budget of `max_steps`; *steps gets the steps taken.
  static Result<RegexDfa> CompileWithin(std::string_view pattern, size_t max_steps, size_t* steps);

  std::vector<std::array<int, 256>> table_;
  std::vector<bool> accepting_;
};

}  // namespace braid::rt
