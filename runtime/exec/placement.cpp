#include "runtime/placement.h"

#include <algorithm>

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
  if (policy_ == Placement::kLeastLoaded) return least;
  const int bound = c[least].load + Slack(c[least].load);
  int best = least;
  for (int i = 0; i < n; ++i) {
    if (!eligible(i) || c[i].load > bound) continue;
    if (c[i].cached > c[best].cached || (c[i].cached == c[best].cached && c[i].load < c[best].load))
      best = i;
  }
  return best;
}

}  // namespace braid::rt
