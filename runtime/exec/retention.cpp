#include "exec/retention.h"

#include <algorithm>
#include <vector>

namespace braid::rt {
namespace {

// The q-quantile of `v` (nearest rank), v non-empty.
double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

}  // namespace

GapAdvice GapModel::Advise(const std::string& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = history_.find(fn);
  if (it == history_.end() || it->second.outcomes.size() < kMinOutcomes)
    return {true, first_ttl_ms_, first_ttl_ms_ / 2};
  const History& h = it->second;
  const double extended =
      static_cast<double>(std::count(h.outcomes.begin(), h.outcomes.end(), true));
  if (h.gaps.empty() || extended < kMinReuse * static_cast<double>(h.outcomes.size())) return {};
  const std::vector<double> gaps(h.gaps.begin(), h.gaps.end());
  return {true, std::min(max_ttl_ms_, kMargin * Quantile(gaps, kCovered)), Quantile(gaps, 0.5)};
}

void GapModel::Push(History& h, bool extended) {
  h.outcomes.push_back(extended);
  if (h.outcomes.size() > kWindow) h.outcomes.pop_front();
}

GapModel::History& GapModel::Find(const std::string& fn) {
  auto it = history_.find(fn);
  if (it != history_.end()) return it->second;
  if (history_.size() >= kMaxFunctions) history_.erase(history_.begin());
  return history_[fn];
}

void GapModel::Extended(const std::string& fn, double gap_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  History& h = Find(fn);
  Push(h, true);
  h.gaps.push_back(std::max(0.0, gap_ms));
  if (h.gaps.size() > kWindow) h.gaps.pop_front();
}

void GapModel::NotExtended(const std::string& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  Push(Find(fn), false);
}

}  // namespace braid::rt
