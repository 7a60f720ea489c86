// Placement: which of several engines (one per GPU, per tensor-parallel
// group, or a remote server) takes a request. The runtime's dispatcher and
// the OpenAI-compatible API both ask an EnginePlacement (below), which
// filters the engines that can take the request, measures their load and
// cached prefix, and lets its Placer choose by the policy:
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
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/status.h"

namespace braid {
class Engine;  // engine/engine.h
}

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

// One engine as the placement service sees it.
struct PlacementEngine {
  Engine* engine = nullptr;  // not owned
  std::string name;          // how NoEngineReason names it
  // Runs its model in this process (Engine::model() non-null): only such an
  // engine scores choices and masks logits.
  bool local = true;
  // Requests the caller has in this engine, counted by the caller around
  // its submissions (the runtime does; 0 when nobody counts). A load is
  // running + waiting from the engine's stats, or this count when higher
  // (a remote engine's stats lag behind what was sent to it).
  std::shared_ptr<std::atomic<int>> in_flight = std::make_shared<std::atomic<int>>(0);
};

// `engines` (not owned) as placement engines named `names` (empty:
// "engine0", "engine1", ...), local when they run their model here.
std::vector<PlacementEngine> PlacementEngines(const std::vector<Engine*>& engines,
                                              const std::vector<std::string>& names = {});

// What a request asks of placement beside its prompt.
struct PlacementNeeds {
  uint64_t salt = 0;          // the prefix cache's tenant (GenerationRequest::cache_salt)
  bool prefer_prefix = true;  // false: by load only, cached prefixes unasked
  bool needs_local = false;   // select and regex outputs, response_format constraints
  bool latency = false;       // the request's goal is latency (Placer::Choose)
};

// The placement service: one policy over a fixed set of engines. An engine
// can take a request when it is alive (Engine::alive) and, for needs_local,
// local. Thread-safe: engines are thread-safe themselves, the Placer's turn
// is atomic, and the engine list never changes.
class EnginePlacement {
 public:
  EnginePlacement(std::vector<PlacementEngine> engines, Placement policy);
  EnginePlacement(const EnginePlacement&) = delete;
  EnginePlacement& operator=(const EnginePlacement&) = delete;

  const std::vector<PlacementEngine>& engines() const { return engines_; }
  const PlacementEngine& engine(int i) const { return engines_[static_cast<size_t>(i)]; }
  const Placer& placer() const { return placer_; }

  // Whether engine `i` (any int) can take a request now.
  bool CanTake(int i, bool needs_local) const;
  // The index of the engine the policy chooses among those that can take
  // the request, -1 when none can (NoEngineReason says why). Cached
  // prefixes of `prompt` are probed only when the policy reads them, the
  // request prefers them and there is a choice to make.
  int Pick(const std::vector<int32_t>& prompt, const PlacementNeeds& needs) const;
  // Why Pick found no engine: each engine and what it lacks.
  std::string NoEngineReason(bool needs_local) const;

 private:
  const std::vector<PlacementEngine> engines_;
  Placer placer_;
};

}  // namespace braid::rt
