// How many tokens a step may hold while latency-class work runs, learned from
// measured step times: throughput-class work fills each step up to the size
// whose time stays within `ratio` of a step holding the latency work alone.
// The default, 1.3, keeps the latency request's inter-token time within the
// 1.5x goal with room for noise (with 1.4 it measured up to 1.48x).
//
// The engine reports every step (tokens, milliseconds, whether it held only
// latency-class tokens). Step time by size is kept as a moving average per
// token count; the reference is the average of latency-only steps of the
// same latency token count. The cap grows one token at a time into sizes not
// yet measured (at most one step over budget per new size), stops at the
// first measured size over budget, and every `refresh_steps` steps one step
// runs the latency work alone again so that the reference follows the
// growing contexts. Pure arithmetic; the step loop owns it.
#pragma once

#include <cstddef>
#include <vector>

namespace braid {

class LatencyBudget {
 public:
  explicit LatencyBudget(int max_tokens, double ratio = 1.3, int refresh_steps = 32)
      : ratio_(ratio),
        refresh_steps_(refresh_steps),
        mixed_(static_cast<size_t>(max_tokens) + 1, -1.0),
        alone_(static_cast<size_t>(max_tokens) + 1, -1.0) {}

  // A step of n tokens took `ms`; `latency_only`: every token was latency-class.
  void Observe(int n, double ms, bool latency_only);

  // The most tokens the next step may hold when its latency-class work is
  // `n_latency` tokens (>= n_latency).
  int Cap(int n_latency) const;

  // The measured average of an n-token step (-1 if never measured).
  double StepMs(int n) const { return Valid(n) ? mixed_[static_cast<size_t>(n)] : -1.0; }

 private:
  bool Valid(int n) const { return n >= 1 && n < static_cast<int>(mixed_.size()); }
  static void Average(double& avg, double x) { avg = avg < 0 ? x : 0.7 * avg + 0.3 * x; }

  double ratio_;
  int refresh_steps_;
  int since_alone_ = 0;        // steps since the last latency-only step
  std::vector<double> mixed_;  // every step, by token count
  std::vector<double> alone_;  // latency-only steps, by token count
};

}  // namespace braid
