// The lower KV tier: blocks the device's pool evicted, kept in host memory
// to be copied back instead of recomputed (SGLang's HiCache, vLLM's CPU
// offload). The radix cache hands each evicted block over (its eviction
// sink); the scheduler asks the tier for the blocks that continue a device
// match and copies them back into fresh device blocks.
//
// A block is keyed by its chain hash (RadixCache::ChainHash): the hash of
// its tokens and of its parent's key, seeded by the cache salt, so a key
// names the whole prefix up to and including the block. Every entry also
// keeps its salt, its parent's key and its tokens, and a lookup compares all
// three: a hash collision never serves another prefix's KV, and a tenant
// never reads another's.
//
// Slots: a fixed number of block_bytes each, in one anonymous mapping
// touched only as slots fill (a hard limit: nothing grows past it). When
// every slot is in use, a new block replaces the least recently used entry
// that no pending copy reads. Pins (Match) keep an entry and its slot until
// the copy back is asked for (Unpin): copies run in the order they are asked
// for (KvMemory), so a slot reused after that is written only after it was read.
//
// Not thread-safe: the owner's lock (the engine's KV lock) guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/status.h"

namespace braid::kv {

using SlotId = int32_t;

struct TierStats {
  int slots = 0;          // capacity
  int used = 0;           // slots holding a block
  int pinned = 0;         // of those, read by a copy not yet asked for
  uint64_t stored = 0;    // blocks written in
  uint64_t replaced = 0;  // entries dropped for room
  uint64_t dropped = 0;   // entries dropped because a copy failed
  uint64_t hits = 0;      // blocks Match found
};

class KvTier {
 public:
  // Maps n_slots * block_bytes bytes (error when that fails).
  static Result<std::unique_ptr<KvTier>> Create(int n_slots, size_t block_bytes, int block_size);
  ~KvTier();
  KvTier(const KvTier&) = delete;
  KvTier& operator=(const KvTier&) = delete;

  int n_slots() const { return static_cast<int>(slots_.size()); }
  size_t block_bytes() const { return block_bytes_; }
  int block_size() const { return block_size_; }
  // The slots' memory, for KvMemory::RegisterHost.
  void* memory() const { return memory_; }
  size_t bytes() const { return bytes_; }
  uint8_t* data(SlotId s) const { return static_cast<uint8_t*>(memory_) + s * block_bytes_; }

  // A slot to copy the block `tokens` (block_size tokens after the prefix
  // keyed `parent`, under `salt`) into. Returns -1 when the tier already
  // holds that block (it is marked used now) or every slot is pinned.
  SlotId Store(uint64_t salt, uint64_t parent, std::span<const int32_t> tokens);
  // The slots of the blocks that continue the prefix keyed `parent`: the
  // longest run of whole blocks of `tokens` the tier holds, in order. Each
  // is pinned until Unpin and marked used now.
  std::vector<SlotId> Match(uint64_t salt, uint64_t parent, std::span<const int32_t> tokens);
  // How many whole blocks of `tokens` Match would find; pins and touches nothing.
  int Probe(uint64_t salt, uint64_t parent, std::span<const int32_t> tokens) const;
  void Unpin(SlotId s);
  // Forgets the entry in `s` (a copy into or out of it failed); its slot is free.
  void Drop(SlotId s);

  TierStats stats() const;
  // Walks every slot and checks the index, the LRU order and the counters.
  Status CheckInvariants() const;

 private:
  KvTier(void* memory, size_t bytes, int n_slots, size_t block_bytes, int block_size);
  struct Slot {
    bool used = false;
    uint64_t key = 0, salt = 0, parent = 0;
    std::vector<int32_t> tokens;
    int pins = 0;
    uint64_t tick = 0;  // last use; in lru_ while used and unpinned
  };
  // The slot holding the block with these keys and tokens, or -1.
  SlotId Find(uint64_t salt, uint64_t parent, std::span<const int32_t> block) const;
  void Release(SlotId s);
  void Touch(SlotId s);

  void* memory_;
  size_t bytes_, block_bytes_;
  int block_size_;
  std::vector<Slot> slots_;
  std::vector<SlotId> free_;
  std::unordered_multimap<uint64_t, SlotId> index_;  // key -> slot
  std::map<uint64_t, SlotId> lru_;                   // tick -> unpinned used slot
  uint64_t clock_ = 0;
  TierStats counts_;
};

}  // namespace braid::kv
