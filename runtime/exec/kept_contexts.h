// The contexts a run keeps between its calls (RuntimeOptions::retention, DAG
// mode): when a call finishes, its context (its prompt and output) is kept,
// as the GapModel advises, for the run's next call that extends it: held in
// the engine that ran it (a pin the engine may break when it needs the room)
// and/or announced as expected back (Engine::ExpectUse). A later request
// whose prompt extends a kept context takes over its hold, released once
// that request is admitted (it then holds the prefix itself).
//
// Owned by a run's executor; not thread-safe (the run's lock guards it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exec/dispatcher.h"

namespace braid::rt {

// An expectation (held when pinning) on an engine: Engine::ExpectUse's id.
struct KeptHold {
  int engine = 0;
  uint64_t hint = 0;  // 0: none
};

class KeptContexts {
 public:
  static constexpr size_t kMaxKept = 8;  // per run, oldest dropped first

  // Inactive (every method a no-op) unless `active` (DAG mode) and the
  // runtime has a GapModel. `program`: the program's source hash, or its
  // name when unhashed; functions are known to the GapModel within it.
  KeptContexts(const RuntimeContext* ctx, bool active, std::string program);

  // Keeps `context` of a call of function `fn`, finished on `engine`.
  void Keep(const std::string& fn, int engine, std::vector<int32_t> context);
  // Marks the kept contexts `prompt` extends (it starts with at least half
  // of one, and a KV block's worth) and returns their holds, now the
  // caller's to Release.
  std::vector<KeptHold> Match(const std::vector<int32_t>& prompt);
  void Release(const KeptHold& hold) const;
  // Releases the holds whose time-to-live passed and asks the engines to
  // bring back the contexts whose call is near (at half the expected gap:
  // a lower KV tier's copy is cheap, and uses free blocks only); *next: the
  // next such time.
  void Expire(Clock::time_point now, std::optional<Clock::time_point>* next);
  // The run is over: releases every hold, tells the GapModel which
  // contexts no call extended, and keeps nothing more.
  void Drop();

 private:
  struct Kept {
    int engine = 0;
    std::vector<int32_t> tokens;  // its prompt and output
    std::string fn;               // its function, as the GapModel knows it
    Clock::time_point finished{}, expires{};
    // When its prefix is brought back from a lower KV tier, ahead of the
    // expected call (Engine::Prefetch), and whether it was.
    Clock::time_point prefetch_at{};
    bool prefetched = true;
    KeptHold hold;          // pin and expectation while kept (0: none)
    bool extended = false;  // a later call of the run extends it
  };

  const RuntimeContext* ctx_;
  const std::string program_;
  bool active_;
  std::vector<Kept> kept_;  // oldest first
};

}  // namespace braid::rt
