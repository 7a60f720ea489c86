#include "sched/latency_budget.h"

#include <algorithm>

namespace braid {

void LatencyBudget::Observe(int n, double ms, bool latency_only) {
  if (!Valid(n) || ms < 0) return;
  Average(mixed_[static_cast<size_t>(n)], ms);
  if (latency_only) {
    Average(alone_[static_cast<size_t>(n)], ms);
    since_alone_ = 0;
  } else {
    ++since_alone_;
  }
}

int LatencyBudget::Cap(int n_latency) const {
  const int top = static_cast<int>(mixed_.size()) - 1;
  n_latency = std::clamp(n_latency, 1, top);
  const double ref = alone_[static_cast<size_t>(n_latency)];
  if (ref < 0 || since_alone_ >= refresh_steps_) return n_latency;  // measure the work alone
  int cap = n_latency;
  for (int n = n_latency + 1; n <= top; ++n) {
    const double t = mixed_[static_cast<size_t>(n)];
    if (t < 0) return n;  // not measured yet: try it
    if (t > ratio_ * ref) break;
    cap = n;
  }
  return cap;
}

}  // namespace braid
