#include "spec/goodput.h"

#include <algorithm>

namespace braid::spec {

void Acceptance::Observe(int proposed, int accepted) {
  if (proposed <= 0) return;
  // Guesses are checked in order until the first rejection: each checked
  // one is a draw of the per-position rate.
  const int tried = accepted + (accepted < proposed ? 1 : 0);
  const double rate = static_cast<double>(accepted) / tried;
  const double w = std::min(1.0, 0.1 * tried);
  rate_ = (1 - w) * rate_ + w * rate;
}

bool Acceptance::Probe() {
  if (++idle_ < 16) return false;
  idle_ = 0;
  return true;
}

bool ProbeSchedule::Due() {
  if (++idle_ < interval_) return false;
  idle_ = 0;
  return true;
}

void ProbeSchedule::Observe(int accepted) {
  interval_ = accepted > 0 ? std::max(16, interval_ / 2) : std::min(2 * interval_, 4096);
}

void StepCost::Observe(int n, double seconds) {
  if (n < 1 || n > max_tokens() || !(seconds > 0)) return;
  double& s = seconds_[static_cast<size_t>(n)];
  s = s > 0 ? 0.8 * s + 0.2 * seconds : seconds;
  at_[static_cast<size_t>(n)] = ++observations_;
  // A size not seen for kForget observations is forgotten (estimated again,
  // so tried again): a one-off slow step, e.g. the first use of a kernel
  // shape, must not keep its size from being chosen for good.
  largest_ = 0;
  for (int m = 1; m <= max_tokens(); ++m) {
    if (seconds_[m] > 0 && observations_ - at_[m] > kForget) seconds_[m] = 0;
    if (seconds_[m] > 0) largest_ = m;
  }
  // Every size's estimate: measured, else interpolated between the nearest
  // measured sizes around it, else that of the nearest measured size; and
  // never below a smaller size's measurement (a lucky fast sample must not
  // make its size look like a bargain).
  const int top = max_tokens();
  std::vector<int>& next = next_;  // the next measured size >= m
  next.assign(static_cast<size_t>(top) + 2, top + 1);
  for (int m = top; m >= 1; --m) next[m] = seconds_[m] > 0 ? m : next[m + 1];
  // Beyond the largest measured size: the slope from the smallest to the
  // largest measured, so that a step which costs more per token (a CPU)
  // is not explored as if the next size were free.
  const int first = next[1];
  const double slope =
      largest_ > first ? std::max(0.0, (seconds_[largest_] - seconds_[first]) / (largest_ - first))
                       : 0.0;
  int lo = 0;  // the last measured size so far
  double floor = 0;
  for (int m = 1; m <= top; ++m) {
    double t = 0;
    if (seconds_[m] > 0) {
      t = seconds_[m];
      lo = m;
    } else {
      const int hi = next[m];
      if (lo >= 1 && hi <= top)
        t = seconds_[lo] + (seconds_[hi] - seconds_[lo]) * (m - lo) / (hi - lo);
      else if (lo >= 1)
        t = seconds_[lo] + slope * (m - lo);
      else if (hi <= top)
        t = seconds_[hi];
    }
    estimate_[m] = std::max(t, floor);
    if (seconds_[m] > 0) floor = std::max(floor, seconds_[m]);
  }
}

bool GuessCouldPay(const StepCost& cost, int base_tokens, int sampling) {
  if (cost.Seconds(base_tokens) <= 0 || base_tokens >= cost.max_tokens()) return false;
  return (sampling + 1.0) / cost.Seconds(base_tokens + 1) >
         1.02 * sampling / cost.Seconds(base_tokens);
}

std::vector<int> ChooseGuesses(const StepCost& cost, int base_tokens, int sampling,
                               std::span<const Candidate> candidates) {
  std::vector<int> k(candidates.size(), 0);
  if (cost.Seconds(base_tokens) <= 0) return k;  // a plain step first, to measure
  // Every guess's expected gain, best first; on equal gains the earlier
  // guesses of every sequence before the later ones of any, so that
  // sequences of equal acceptance share the guesses (none falls behind).
  struct Gain {
    double gain;
    int j;     // the guess's place in its sequence's guesses
    size_t i;  // the candidate
  };
  std::vector<Gain> gains;
  for (size_t i = 0; i < candidates.size(); ++i) {
    double g = 1.0;
    for (int j = 0; j < candidates[i].available; ++j) {
      g *= candidates[i].acceptance;
      gains.push_back({g, j, i});
    }
  }
  std::sort(gains.begin(), gains.end(), [](const Gain& a, const Gain& b) {
    if (a.gain != b.gain) return a.gain > b.gain;
    return a.j != b.j ? a.j < b.j : a.i < b.i;
  });
  // Longer steps are tried in stages: at most twice the guesses of the
  // largest step measured so far.
  int limit = std::max(1, 2 * (cost.largest() - base_tokens));
  limit = std::min({limit, static_cast<int>(gains.size()), cost.max_tokens() - base_tokens});
  double expected = sampling, best = sampling / cost.Seconds(base_tokens);
  int best_k = 0;
  for (int n = 1; n <= limit; ++n) {
    expected += gains[n - 1].gain;
    const double rate = expected / cost.Seconds(base_tokens + n);
    if (rate > best * 1.02) best = rate, best_k = n;  // 2%: not for noise
  }
  for (int n = 0; n < best_k; ++n) ++k[gains[n].i];
  return k;
}

int UsefulGuesses(double acceptance, int max_tokens) {
  // Guess j (from 1) holds with chance acceptance^j.
  int n = 1;
  for (double next = acceptance * acceptance; n < max_tokens && next >= 0.1; next *= acceptance)
    ++n;
  return n;
}

}  // namespace braid::spec
