#include "sched/step_budget.h"

#include <algorithm>

namespace braid {

StepBudget::StepBudget(int max_tokens, double target_ms, int granule, int probe_steps)
    : max_tokens_(std::max(1, max_tokens)),
      target_ms_(target_ms),
      granule_(std::clamp(granule, 1, std::max(1, max_tokens))),
      probe_steps_(std::max(1, probe_steps)),
      avg_(static_cast<size_t>((max_tokens_ + granule_ - 1) / granule_) + 1, -1.0) {}

void StepBudget::Observe(int n, double ms) {
  if (n < 1 || n > max_tokens_ || ms < 0) return;
  const int b = Bucket(n);
  double& avg = avg_[static_cast<size_t>(b)];
  avg = avg < 0 ? ms : 0.7 * avg + 0.3 * ms;
  since_probe_ = b > Within(nullptr) ? 0 : since_probe_ + 1;
}

int StepBudget::Within(bool* unmeasured) const {
  const int top = static_cast<int>(avg_.size()) - 1;
  for (int b = 1; b <= top; ++b) {
    const double t = avg_[static_cast<size_t>(b)];
    if (t < 0 || t > target_ms_) {
      if (unmeasured) *unmeasured = t < 0;
      return b - 1;
    }
  }
  if (unmeasured) *unmeasured = false;
  return top;
}

int StepBudget::Cap() const {
  bool unmeasured = false;
  int b = Within(&unmeasured);
  // The bucket above: never measured, or over the target but not tried for
  // a while; and one granule at least.
  if (unmeasured || since_probe_ >= probe_steps_ || b == 0) ++b;
  return std::min(b * granule_, max_tokens_);
}

double StepBudget::StepMs(int n) const {
  return n >= 1 && n <= max_tokens_ ? avg_[static_cast<size_t>(Bucket(n))] : -1.0;
}

}  // namespace braid
