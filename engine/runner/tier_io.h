// The serving engine's side of the lower KV tier (kv/kv_tier.h): which
// blocks move between the device's pool and the tier, and when.
//   - Out: the radix cache's eviction sink hands each evicted block over
//     (OnEvict); its copy out is asked for before the next forward pass,
//     which may reuse the block.
//   - In: the scheduler's plan lists the blocks an admission found in the
//     tier (StepPlan::loads); they are copied in before the step's pass,
//     which waits for them. A prefetch (Prefetch: an expected read whose
//     prefix is in the tier) copies blocks in ahead of the request that
//     reads them, so the passes before it overlap the copy.
//   - A copy that fails: its tier entries are dropped, and a load's
//     sequence goes back to waiting and computes those positions.
// Copy times are taken from the backend as copies finish: a copy in that a
// pass waited for while it ran counts as exposed, one done before the pass
// that read it as hidden.
//
// Step loop only, under the engine's KV lock (Prefetch too: it holds it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "kv/block_pool.h"
#include "kv/kv_tier.h"
#include "kv/radix_cache.h"
#include "sched/scheduler.h"

namespace braid {

class TierIo {
 public:
  // A tier of `bytes` over `kv`'s blocks (its memory registered with `kv`).
  // The tier's blocks go to and come from `pool` and `cache` (all three
  // outlive it). Without `prefetch`, Prefetch brings nothing back.
  static Result<std::unique_ptr<TierIo>> Open(KvMemory& kv, uint64_t bytes, int block_size,
                                              kv::BlockPool& pool, kv::RadixCache& cache,
                                              bool prefetch = true);
  ~TierIo();

  kv::KvTier& tier() { return *tier_; }

  // The radix cache's eviction sink (RadixCache::set_evict_sink).
  void OnEvict(uint64_t salt, uint64_t parent, std::span<const int32_t> tokens, kv::BlockId block);
  // Brings the tier's continuation of `tokens`' cached prefix back to the
  // device ahead of its read: as many blocks as the pool has free (and,
  // under next-use eviction, can free without touching an expected prefix),
  // copied in before the next pass, which they join the cache at.
  // Returns the blocks it brings back.
  int Prefetch(uint64_t salt, std::span<const int32_t> tokens);
  // Asks for the copies of the prefetches so far: their blocks join the
  // cache (a pass that reads them waits for the copy); a failed one gives
  // its blocks back. Before planning, so that admissions find them.
  void AskPrefetches();
  // Before the plan's forward pass: asks for the copies queued (out, then
  // prefetches and the plan's loads in), sends back to waiting the
  // sequences whose load failed, and makes the pass wait for what it reads.
  void Flush(StepPlan& plan, Scheduler& scheduler);
  // The tier's gauges and counters into `s`.
  void AddStats(EngineStats* s);

 private:
  TierIo(KvMemory& kv, std::unique_ptr<kv::KvTier> tier, kv::BlockPool& pool, kv::RadixCache& cache)
      : kv_(kv), tier_(std::move(tier)), pool_(&pool), cache_(&cache) {}
  enum class Kind { kOut, kIn, kPrefetch };
  struct Copy {
    Kind kind;
    bool waited = false;  // a pass waited for it before it was done
  };
  // Asks for one copy; returns its fence, or 0 when it failed (counted).
  uint64_t CopyOut(std::span<const kv::BlockId> blocks, std::span<const kv::SlotId> slots);
  uint64_t CopyIn(std::span<const kv::SlotId> slots, std::span<const kv::BlockId> blocks,
                  Kind kind);
  // Collects the times of finished copies.
  void Collect();

  KvMemory& kv_;
  std::unique_ptr<kv::KvTier> tier_;
  bool prefetch_ = true;
  bool registered_ = false;
  // Evicted blocks waiting for their copy out, and their slots.
  std::vector<kv::BlockId> out_blocks_;
  std::vector<kv::SlotId> out_slots_;
  kv::BlockPool* pool_;
  kv::RadixCache* cache_;
  // Prefetches waiting for their copy in: the prefix's tokens (whole
  // blocks), its blocks (the device's match, locked, then the new ones from
  // `first` on, held) and the tier slots those come from (pinned).
  struct Prefetched {
    uint64_t salt = 0;
    std::vector<int32_t> tokens;
    std::vector<kv::BlockId> blocks;
    size_t first = 0;
    std::vector<kv::SlotId> slots;
    kv::LockId lock = 0;
  };
  std::vector<Prefetched> prefetched_;
  // Prefetched blocks whose copy in may still run -> its fence.
  std::unordered_map<kv::BlockId, uint64_t> landing_;
  std::map<uint64_t, Copy> copies_;  // fence -> copy whose time is not yet taken
  // Counters for EngineStats.
  uint64_t blocks_in_ = 0, blocks_out_ = 0, failures_ = 0;
  double in_exposed_ = 0, in_hidden_ = 0, out_seconds_ = 0;
};

}  // namespace braid
