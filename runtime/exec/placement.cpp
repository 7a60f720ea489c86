#include "runtime/placement.h"

#include <algorithm>
#include <vector>

namespace braid::rt {

Result<Placement> ParsePlacement(const std::string& name) {
  if (name == "affinity") return Placement::kAffinity;
  if (name == "least-loaded") return Placement::kLeastLoaded;
  if (name == "round-robin") return Placement::kRoundRobin;
  return Status::InvalidArgument("unknown placement '" + name +
                                 "' (affinity, least-loaded or round-robin)");
}

const char* PlacementName(Placement p) {
  switch (p) {
    case Placement::kAffinity:
      return "affinity";
    case Placement::kLeastLoaded:
      return "least-loaded";
    case Placement::kRoundRobin:
      return "round-robin";
  }
  return "?";
}

int Placer::Choose(std::span<const PlacementCandidate> c, bool latency) const {
  const int n = static_cast<int>(c.size());
  if (n == 0) return -1;
  if (policy_ == Placement::kRoundRobin)
    return static_cast<int>(next_++ % static_cast<uint64_t>(n));
  // Goal fit: a latency request goes where it runs at once, if anywhere does.
  bool any_idle_slot = false;
  for (const PlacementCandidate& e : c) any_idle_slot |= e.waiting == 0;
  auto eligible = [&](int i) { return !(latency && any_idle_slot && c[i].waiting > 0); };
  int least = -1;
  for (int i = 0; i < n; ++i)
    if (eligible(i) && (least < 0 || c[i].load < c[least].load)) least = i;
  // A match shorter than kMinAffinityTokens (a chat template's header) is no prefix.
  const bool affinity = policy_ == Placement::kAffinity;
  auto cached = [&](int i) {
    return affinity && c[i].cached >= kMinAffinityTokens ? c[i].cached : 0;
  };
  const int bound = c[least].load + (affinity ? Slack(c[least].load) : 0);
  auto better = [&](int i, int j) {  // i before j
    return cached(i) > cached(j) || (cached(i) == cached(j) && c[i].load < c[j].load);
  };
  int best = least;
  for (int i = 0; i < n; ++i)
    if (eligible(i) && c[i].load <= bound && better(i, best)) best = i;
  // Equals take turns, so that new prefixes spread over idle engines.
  std::vector<int> ties;
  for (int i = 0; i < n; ++i)
    if (eligible(i) && c[i].load <= bound && !better(best, i)) ties.push_back(i);
  return ties[next_++ % ties.size()];
}

}  // namespace braid::rt
