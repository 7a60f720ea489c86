// A radix tree over token blocks for automatic prefix reuse (SGLang's
// RadixAttention at block granularity).
//
// Each tree edge holds a run of *full* blocks: block i of a path holds the KV
// of tokens [i*block_size, (i+1)*block_size) of every prompt that starts with
// that path. Partial blocks are never in the tree, so they are never shared.
// Each tenant's entries live under their own root, chosen by a 64-bit salt:
// two requests share cache entries only when they carry the same salt.
//
// Reference counting: the tree holds one BlockPool reference on every block
// it contains. A *lock* (taken for a running sequence that uses a cached
// prefix, or by a pin) marks the nodes of a path as in use; only leaves with
// no lock are evicted, which releases the tree's reference.
//
// Eviction order: least recently used first (EvictOrder::kLru), or by
// expected next use (kNextUse): a caller that knows when a cached prefix will
// be read again (an agent program in a tool call will extend its context when
// the tool returns) says so with Expect; eviction then takes first the
// leaves no expectation covers, least recently used first, and only then
// the expected ones, the one expected furthest in the future first (Belady's
// rule on what is known; KVFlow's steps-to-next-use).
//
// Not thread-safe: the step loop owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/status.h"
#include "kv/block_pool.h"

namespace braid::kv {

// An opaque handle on a locked path (0 = none).
using LockId = uint64_t;
// An opaque handle on an expected read (0 = none).
using HintId = uint64_t;

enum class EvictOrder { kLru, kNextUse };

struct PrefixMatch {
  std::vector<BlockId> blocks;  // the cached blocks of the longest prefix, in order
  int tokens = 0;               // blocks.size() * block_size
  bool expected = false;        // MatchAndLock: an expectation (Expect) covers its end
  uint64_t chain = 0;           // chain key of its last block (ChainSeed(salt) when empty)
};

// Called for each block eviction takes from the tree, before the tree lets
// go of it: the block's salt, its parent's chain key, its tokens and where
// it is (a lower tier copies it out: kv_tier.h).
using EvictSink = std::function<void(uint64_t salt, uint64_t parent,
                                     std::span<const int32_t> tokens, BlockId block)>;

struct RadixStats {
  int cached_blocks = 0;     // blocks held by the tree
  int evictable_blocks = 0;  // of those, in unlocked subtrees that eviction could free
  int locks = 0;             // live locks (sequences and pins)
  // Of evictable_blocks, those on no path an expectation (Expect) covers:
  // what eviction can take without touching a prefix someone will read again.
  int unexpected_blocks = 0;
  int hints = 0;        // live expectations
  int holds = 0;        // of those, held (locking their path)
  int held_blocks = 0;  // the held expectations' paths' blocks (a shared prefix once per hold)
};

class RadixCache {
 public:
  RadixCache(BlockPool& pool, int block_size, EvictOrder order = EvictOrder::kLru);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  int block_size() const { return block_size_; }
  EvictOrder order() const;

  // Chain keys name a whole prefix by its last block: ChainHash of the
  // block's tokens and its parent's key, the first block's parent being
  // ChainSeed(salt).
  static uint64_t ChainSeed(uint64_t salt);
  static uint64_t ChainHash(uint64_t parent, std::span<const int32_t> block);
  // Hears every evicted block (none: dropped).
  void set_evict_sink(EvictSink sink);

  // The longest cached prefix of `tokens` under `salt`, in whole blocks, and
  // locks it (so it cannot be evicted) until Unlock(*lock). When nothing
  // matches, *lock is 0 and the result empty. Marks the path as used now (LRU).
  PrefixMatch MatchAndLock(uint64_t salt, std::span<const int32_t> tokens, LockId* lock);
  // Length in tokens of the longest cached prefix, without locking or touching LRU order.
  int Probe(uint64_t salt, std::span<const int32_t> tokens) const;
  void Unlock(LockId lock);

  // Offers the full blocks of a computed sequence: blocks[i] holds tokens
  // [i*block_size, (i+1)*block_size), tokens.size() >= blocks.size()*block_size.
  // Blocks whose range is not yet cached are added (the tree takes a
  // reference); ranges already cached keep the tree's existing blocks (the
  // caller keeps and later releases its own copies). Returns how many blocks
  // were newly added.
  int Insert(uint64_t salt, std::span<const int32_t> tokens, std::span<const BlockId> blocks);

  // Pins the cached prefix of `tokens` (whole blocks) so that eviction never
  // takes it until Unpin. Returns 0 when nothing of it is cached.
  LockId Pin(uint64_t salt, std::span<const int32_t> tokens);
  void Unpin(LockId pin) { Unlock(pin); }

  // Records that the cached prefix of `tokens` (whole blocks) is expected to
  // be read again at `when` (any clock the caller keeps to; smaller is
  // sooner), until Forget. It locks nothing: under kNextUse it only orders
  // eviction (see the top of this file), under kLru it is counted and
  // otherwise ignored. Several expectations may cover one node; the soonest
  // counts. When eviction shortens the path, the expectation stays on what
  // is left of it. Marks the path as used now. Returns 0 when nothing of
  // `tokens` is cached.
  //
  // With `hold`, the expectation also locks its path, as a pin does, until
  // Forget or Unhold: a pin the engine may break when it needs the room.
  // A hold that would take the held blocks (RadixStats::held_blocks) past
  // set_max_held_blocks is not taken: the expectation is made unheld.
  HintId Expect(uint64_t salt, std::span<const int32_t> tokens, double when, bool hold = false);
  void set_max_held_blocks(int blocks);
  // Drops an expectation (and its hold); an id already dropped, or 0, is ignored.
  void Forget(HintId hint);
  // Breaks holds, the one expected furthest in the future first, until
  // `blocks` more blocks are evictable or no hold is left; the expectations
  // stay, unheld. Returns how many blocks became evictable.
  int Unhold(int blocks);

  // Evicts unlocked leaves in the cache's order (EvictOrder) until `n` blocks went
  // back to the pool's free list or nothing evictable is left. Returns the
  // number of blocks freed.
  int Evict(int n);

  // cached_blocks and locks are exact. evictable_blocks counts the tree's
  // blocks on nodes no lock passes through; a block there that a running
  // sequence also still holds leaves the tree on eviction but does not go back
  // to the free list. O(1): kept up to date by every operation.
  RadixStats stats() const;

  // Diagnostics and tests. None of these locks, splits or touches LRU order.
  //
  // The cached blocks of the longest prefix of `tokens` under `salt` (what
  // MatchAndLock would return).
  PrefixMatch Lookup(uint64_t salt, std::span<const int32_t> tokens) const;
  // Every block the tree holds, in no particular order.
  std::vector<BlockId> CachedBlocks() const;
  // Walks the whole tree (O(tree)) and checks the structure: edge lengths,
  // parent links, child keys, lock counts against the live locks, the
  // evictable-leaf index, the counters behind stats(), no block held twice and
  // a tree reference on each. Returns Internal with the first violation found.
  Status CheckInvariants() const;

 private:
  struct Node;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  BlockPool& pool_;
  int block_size_;
};

}  // namespace braid::kv
