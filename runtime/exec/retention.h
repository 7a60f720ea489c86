// What the runtime learns of the gaps between a program's calls, to keep a
// finished call's context in the engine until the program comes back to
// extend it (an agent's tool call between two turns: Continuum's
// time-to-live, learned per function from measured gaps).
//
// Per function (of one program source): of its finished calls, how many a
// later call of the same run extended, and after how long. A function whose
// calls are rarely extended (a map step) is not kept; one whose calls are
// (an agent's turn) is kept for a time that covers most of the gaps seen.
// Thread-safe.
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <string>

namespace braid::rt {

struct GapAdvice {
  bool keep = false;       // keep the context at all
  double ttl_ms = 0;       // how long
  double expected_ms = 0;  // when the next call is expected (the engine's eviction order)
};

class GapModel {
 public:
  // Outcomes kept per function, the fewest before the model trusts them,
  // and the share of extended calls below which a function is not kept.
  static constexpr size_t kWindow = 32;
  static constexpr size_t kMinOutcomes = 3;
  static constexpr double kMinReuse = 0.25;
  // The share of gaps the time-to-live covers, and its margin.
  static constexpr double kCovered = 0.9;
  static constexpr double kMargin = 1.25;
  // Functions remembered at most (a long-lived server sees many programs).
  static constexpr size_t kMaxFunctions = 4096;

  GapModel(double first_ttl_ms, double max_ttl_ms)
      : first_ttl_ms_(first_ttl_ms), max_ttl_ms_(max_ttl_ms) {}

  // Before kMinOutcomes outcomes: keep for the first TTL, expected back in
  // half of it. Then: keep when at least kMinReuse of the last kWindow
  // calls were extended, for kMargin times the kCovered quantile of their
  // gaps (at most the max TTL), expected back at the median gap.
  GapAdvice Advise(const std::string& fn) const;
  // A call of `fn` was extended by a later call `gap_ms` after it finished.
  void Extended(const std::string& fn, double gap_ms);
  // A call of `fn` was never extended (its run ended first).
  void NotExtended(const std::string& fn);

 private:
  struct History {
    std::deque<bool> outcomes;  // newest last, at most kWindow
    std::deque<double> gaps;    // of the extended ones, newest last, at most kWindow
  };
  static void Push(History& h, bool extended);
  History& Find(const std::string& fn);  // mu_ held
  const double first_ttl_ms_, max_ttl_ms_;
  mutable std::mutex mu_;
  std::map<std::string, History> history_;
};

}  // namespace braid::rt
