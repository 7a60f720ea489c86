// Placement: which of several engines (one per GPU, per tensor-parallel
// group, or a remote server) takes a request. The runtime's dispatcher and
// the OpenAI-compatible API both ask a Placer.
//
//   affinity (default)  among the engines whose load (running + waiting) is
//       within a slack of the least loaded one's, the one holding the longest
//       cached prefix of the prompt (matches under kMinAffinityTokens, such
//       as a chat template's header, count as none), then the least loaded,
//       then in turn among equals (so that new prefixes spread). The slack is
//       max(2, least load / 4) requests: a cached prefix is worth that much
//       queueing, no more, so that one engine holding a popular prefix does
//       not take all the traffic while the others idle. A task group's
//       members (which share their prompt's prefix) therefore stay on the
//       engine that cached it until it is that far ahead of another, and
//       then spill over; the other engine computes the prefix once and the
//       group runs on both. Goal fit: a latency-goal request (on the
//       critical path of its program) skips engines where it would queue
//       (waiting > 0) while an engine would run it at once.
//   least-loaded  the least loaded engine (in turn among equals), cached
//       prefixes ignored.
//   round-robin   the engines in turn, cached prefixes and load ignored (the
//       baseline that affinity is measured against).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "engine/status.h"

namespace braid::rt {

enum class Placement { kAffinity, kLeastLoaded, kRoundRobin };

// "affinity", "least-loaded" or "round-robin".
Result<Placement> ParsePlacement(const std::string& name);
const char* PlacementName(Placement p);

// What placement knows of one engine that can take the request.
struct PlacementCandidate {
  int cached = 0;   // prompt tokens it holds cached (0 when not asked)
  int load = 0;     // requests running and waiting
  int waiting = 0;  // of which waiting for a slot
};

class Placer {
 public:
  explicit Placer(Placement p = Placement::kAffinity) : policy_(p) {}
  Placement policy() const { return policy_; }
  // Whether Choose reads `cached` (only affinity does: probing costs a lookup).
  bool wants_prefix() const { return policy_ == Placement::kAffinity; }
  // The index into `candidates` of the engine to take the request, or -1
  // when there are none. `latency`: the request's goal is latency.
  int Choose(std::span<const PlacementCandidate> candidates, bool latency) const;

  // An engine whose load is at most this far above the least load stays a
  // candidate for its cached prefix.
  static int Slack(int least_load) { return least_load / 4 > 2 ? least_load / 4 : 2; }
  // Cached matches shorter than this count as none.
  static constexpr int kMinAffinityTokens = 64;

 private:
  Placement policy_;
  mutable std::atomic<uint64_t> next_{0};  // round-robin's turn
};

}  // namespace braid::rt
