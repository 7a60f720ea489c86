#include "runtime/placement.h"

#include <algorithm>
#include <vector>

#include "engine/engine.h"

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

std::vector<PlacementEngine> PlacementEngines(const std::vector<Engine*>& engines,
                                              const std::vector<std::string>& names) {
  std::vector<PlacementEngine> out;
  for (size_t i = 0; i < engines.size(); ++i) {
    PlacementEngine e;
    e.engine = engines[i];
    e.name = i < names.size() ? names[i] : "engine" + std::to_string(i);
    e.local = e.engine && e.engine->model() != nullptr;
    out.push_back(std::move(e));
  }
  return out;
}

EnginePlacement::EnginePlacement(std::vector<PlacementEngine> engines, Placement policy)
    : engines_(std::move(engines)), placer_(policy) {}

bool EnginePlacement::CanTake(int i, bool needs_local) const {
  if (i < 0 || i >= static_cast<int>(engines_.size())) return false;
  const PlacementEngine& e = engines_[static_cast<size_t>(i)];
  return (e.local || !needs_local) && e.engine->alive();
}

int EnginePlacement::Pick(const std::vector<int32_t>& prompt, const PlacementNeeds& needs) const {
  std::vector<int> index;
  for (size_t i = 0; i < engines_.size(); ++i)
    if (CanTake(static_cast<int>(i), needs.needs_local)) index.push_back(static_cast<int>(i));
  // With one engine the choice is made: its cache need not be asked.
  const bool probe = needs.prefer_prefix && placer_.wants_prefix() && index.size() > 1;
  std::vector<PlacementCandidate> candidates;
  for (int i : index) {
    const PlacementEngine& e = engines_[static_cast<size_t>(i)];
    PlacementCandidate c;
    if (probe) c.cached = e.engine->ProbePrefix(prompt, needs.salt);
    const EngineStats s = e.engine->stats();
    c.load = std::max(s.running + s.waiting, e.in_flight->load());
    c.waiting = s.waiting;
    candidates.push_back(c);
  }
  const int chosen = placer_.Choose(candidates, needs.latency);
  return chosen < 0 ? -1 : index[static_cast<size_t>(chosen)];
}

std::string EnginePlacement::NoEngineReason(bool needs_local) const {
  std::string out = needs_local ? "no engine can take it (select and regex outputs need an "
                                  "engine that runs its model in this process):"
                                : "no engine can take it:";
  for (size_t i = 0; i < engines_.size(); ++i) {
    const PlacementEngine& e = engines_[i];
    out += (i ? ", " : " ") + e.name;
    if (!e.engine->alive())
      out += " is not alive";
    else if (needs_local && !e.local)
      out += " is remote";
    else
      out += " is available";
  }
  return out;
}

}  // namespace braid::rt
