#include "kv/radix_cache.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace braid::kv {
namespace {

constexpr int kBs = 4;  // tokens per block in these tests

using Tokens = std::vector<int32_t>;
using Blocks = std::vector<BlockId>;

// n token ids start, start+1, ...
Tokens Range(int n, int32_t start) {
  Tokens t(n);
  for (int i = 0; i < n; ++i) t[i] = start + i;
  return t;
}

Tokens Concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Blocks Alloc(BlockPool& pool, int n) {
  Blocks b;
  for (int i = 0; i < n; ++i) {
    auto id = pool.Allocate();
    REQUIRE(id.has_value());
    b.push_back(*id);
  }
  return b;
}

void ReleaseAll(BlockPool& pool, const Blocks& blocks) {
  for (BlockId b : blocks) pool.Release(b);
}

// What a finished sequence does with a prompt nothing of which it took from
// the cache: computes every full block into a fresh block, offers them to the
// cache, drops its own references. Returns the blocks and the Insert count.
Blocks Cache(RadixCache& cache, BlockPool& pool, uint64_t salt, const Tokens& tokens,
             int* added = nullptr) {
  Blocks b = Alloc(pool, static_cast<int>(tokens.size()) / kBs);
  int n = cache.Insert(salt, tokens, b);
  if (added) *added = n;
  ReleaseAll(pool, b);
  return b;
}

Blocks Prefix(const Blocks& b, size_t n) { return Blocks(b.begin(), b.begin() + n); }

void CheckTree(const RadixCache& cache) {
  Status s = cache.CheckInvariants();
  CHECK_MESSAGE(s.ok(), s.ToString());
}

TEST_CASE("match after insert: exact, longer, shorter, diverging prompts") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens p = Range(12, 100);  // three full blocks
  int added = 0;
  Blocks b = Cache(cache, pool, 7, p, &added);
  CHECK(added == 3);
  for (BlockId id : b) CHECK(pool.refcount(id) == 1);  // the tree's reference only

  LockId lock = 0;
  SUBCASE("exact prompt") {
    PrefixMatch m = cache.MatchAndLock(7, p, &lock);
    CHECK(m.blocks == b);
    CHECK(m.tokens == 12);
    CHECK(lock != 0);
  }
  SUBCASE("longer prompt matches the cached part") {
    PrefixMatch m = cache.MatchAndLock(7, Concat(p, Range(9, 500)), &lock);
    CHECK(m.blocks == b);
    CHECK(m.tokens == 12);
  }
  SUBCASE("shorter prompt matches whole blocks only") {
    PrefixMatch m = cache.MatchAndLock(7, Range(10, 100), &lock);
    CHECK(m.blocks == Prefix(b, 2));
    CHECK(m.tokens == 8);
  }
  SUBCASE("divergence inside a block drops that block") {
    Tokens q = p;
    q[9] = -1;  // inside block 2
    PrefixMatch m = cache.MatchAndLock(7, q, &lock);
    CHECK(m.blocks == Prefix(b, 2));
  }
  SUBCASE("divergence in the first block matches nothing") {
    Tokens q = p;
    q[3] = -1;
    PrefixMatch m = cache.MatchAndLock(7, q, &lock);
    CHECK(m.blocks.empty());
    CHECK(m.tokens == 0);
    CHECK(lock == 0);
  }
  SUBCASE("a prompt shorter than one block matches nothing") {
    PrefixMatch m = cache.MatchAndLock(7, Range(3, 100), &lock);
    CHECK(m.blocks.empty());
    CHECK(lock == 0);
  }
  CheckTree(cache);
  cache.Unlock(lock);
  CHECK(cache.stats().locks == 0);
  CheckTree(cache);
}

TEST_CASE("a partial last block is neither inserted nor matched") {
  BlockPool pool(8);
  RadixCache cache(pool, kBs);
  Tokens p = Range(14, 0);    // 3 full blocks + 2 tokens
  Blocks b = Alloc(pool, 4);  // the sequence's table includes the partial block
  CHECK(cache.Insert(1, p, b) == 3);
  ReleaseAll(pool, b);
  CHECK(pool.refcount(b[3]) == 0);  // the partial block went back to the pool
  CHECK(cache.stats().cached_blocks == 3);
  CHECK(cache.Probe(1, p) == 12);
  CHECK(cache.Probe(1, Concat(p, Range(2, 14))) == 12);      // block 3 now full, but never cached
  CHECK(cache.Insert(1, Range(3, 0), Alloc(pool, 1)) == 0);  // less than a block: nothing
  CheckTree(cache);
}

TEST_CASE("a shared prefix splits a node; both branches match") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens a = Range(12, 0);
  Tokens c = Concat(Range(8, 0), Range(8, 50));  // shares two blocks with a
  Blocks ba = Cache(cache, pool, 1, a);
  // c's sequence took the shared blocks from the cache, then computed its own.
  LockId lock = 0;
  PrefixMatch m = cache.MatchAndLock(1, c, &lock);
  CHECK(m.blocks == Prefix(ba, 2));
  Blocks bc = m.blocks;
  for (BlockId id : bc) pool.AddRef(id);
  Blocks own = Alloc(pool, 2);
  bc.insert(bc.end(), own.begin(), own.end());
  CHECK(cache.Insert(1, c, bc) == 2);
  ReleaseAll(pool, bc);
  cache.Unlock(lock);

  CHECK(cache.stats().cached_blocks == 5);
  CHECK(cache.Lookup(1, a).blocks == ba);
  CHECK(cache.Lookup(1, c).blocks == bc);
  CHECK(cache.Probe(1, Range(8, 0)) == 8);
  for (BlockId id : ba) CHECK(pool.refcount(id) == 1);
  for (BlockId id : own) CHECK(pool.refcount(id) == 1);
  CheckTree(cache);
}

TEST_CASE("a branch off the middle of an edge inserted without a prior match") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens a = Range(16, 0);
  Tokens c = Concat(Range(4, 0), Range(8, 70));
  Blocks ba = Cache(cache, pool, 1, a);
  int added = 0;
  // A sequence that computed everything itself: the cached first block stays.
  Blocks bc = Cache(cache, pool, 1, c, &added);
  CHECK(added == 2);
  CHECK(pool.refcount(bc[0]) == 0);
  CHECK(cache.Lookup(1, c).blocks == Blocks{ba[0], bc[1], bc[2]});
  CHECK(cache.Lookup(1, a).blocks == ba);
  CHECK(cache.stats().cached_blocks == 6);
  CheckTree(cache);
}

TEST_CASE("different salts never share blocks") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens p = Range(8, 0);
  Blocks b1 = Cache(cache, pool, 1, p);
  CHECK(cache.Probe(2, p) == 0);
  LockId lock = 123;
  CHECK(cache.MatchAndLock(2, p, &lock).blocks.empty());
  CHECK(lock == 0);
  int added = 0;
  Blocks b2 = Cache(cache, pool, 2, p, &added);
  CHECK(added == 2);  // the same tokens, held again under salt 2
  CHECK(cache.stats().cached_blocks == 4);
  CHECK(cache.Lookup(1, p).blocks == b1);
  CHECK(cache.Lookup(2, p).blocks == b2);
  for (BlockId id : b2) CHECK(std::find(b1.begin(), b1.end(), id) == b1.end());
  CheckTree(cache);

  // Evicting one tenant's entries leaves the other's alone.
  CHECK(cache.Evict(2) == 2);
  CHECK((cache.Probe(1, p) == 0) != (cache.Probe(2, p) == 0));
  CheckTree(cache);
}

TEST_CASE("inserting an already cached range keeps the old blocks") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens p = Range(8, 0);
  Blocks old = Cache(cache, pool, 1, p);
  Blocks dup = Alloc(pool, 2);
  CHECK(cache.Insert(1, p, dup) == 0);
  for (BlockId id : dup) CHECK(pool.refcount(id) == 1);  // still only the caller's
  for (BlockId id : old) CHECK(pool.refcount(id) == 1);  // still only the tree's
  CHECK(cache.Lookup(1, p).blocks == old);
  // A shorter offer inside a cached edge adds nothing either.
  CHECK(cache.Insert(1, Range(4, 0), Prefix(dup, 1)) == 0);
  // A longer one adds only its new tail.
  Blocks more = Alloc(pool, 1);
  Blocks offer = {dup[0], dup[1], more[0]};
  CHECK(cache.Insert(1, Range(12, 0), offer) == 1);
  CHECK(cache.Lookup(1, Range(12, 0)).blocks == Blocks{old[0], old[1], more[0]});
  CHECK(pool.refcount(more[0]) == 2);
  ReleaseAll(pool, dup);
  ReleaseAll(pool, more);
  CHECK(pool.num_free() == 16 - 3);
  CheckTree(cache);
}

TEST_CASE("eviction takes least recently used leaves first") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens a = Range(8, 0), b = Range(8, 100), c = Range(8, 200);
  Cache(cache, pool, 1, a);
  Cache(cache, pool, 1, b);
  Cache(cache, pool, 1, c);
  LockId lock = 0;
  cache.MatchAndLock(1, a, &lock);  // a is now the most recently used
  cache.Unlock(lock);

  CHECK(cache.Evict(2) == 2);
  CHECK(cache.Probe(1, b) == 0);
  CHECK(cache.Probe(1, a) == 8);
  CHECK(cache.Probe(1, c) == 8);
  CHECK(cache.Evict(2) == 2);
  CHECK(cache.Probe(1, c) == 0);
  CHECK(cache.Probe(1, a) == 8);
  CheckTree(cache);
}

TEST_CASE("eviction trims a leaf from its tail, then takes its parent") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens a = Range(12, 0);
  Tokens x = Concat(Range(8, 0), Range(8, 40));  // branch after 2 blocks
  Cache(cache, pool, 1, a);
  Cache(cache, pool, 1, x);
  // Leaves: a's block 2 (older) and x's two blocks; the shared node is inner.
  CHECK(cache.Evict(1) == 1);
  CHECK(cache.Probe(1, a) == 8);
  CHECK(cache.Probe(1, x) == 16);
  CHECK(cache.Evict(1) == 1);  // x's last block
  CHECK(cache.Probe(1, x) == 12);
  CHECK(cache.Evict(1) == 1);
  CHECK(cache.Probe(1, x) == 8);  // the shared prefix is a leaf now
  CheckTree(cache);
  CHECK(cache.Evict(10) == 2);  // returns what it could: nothing is left
  CHECK(cache.stats().cached_blocks == 0);
  CHECK(pool.num_free() == 16);
  CheckTree(cache);
}

TEST_CASE("a recently matched path survives while older ones go") {
  BlockPool pool(32);
  RadixCache cache(pool, kBs);
  Tokens sys = Range(8, 0);
  std::vector<Tokens> users;
  for (int i = 0; i < 4; ++i) users.push_back(Concat(sys, Range(4, 100 * (i + 1))));
  for (const Tokens& u : users) Cache(cache, pool, 1, u);
  LockId lock = 0;
  cache.MatchAndLock(1, users[0], &lock);
  cache.Unlock(lock);
  CHECK(cache.Evict(3) == 3);  // users 1..3's private blocks
  CHECK(cache.Probe(1, users[0]) == 12);
  for (int i = 1; i < 4; ++i) CHECK(cache.Probe(1, users[i]) == 8);
  CheckTree(cache);
}

TEST_CASE("Probe neither locks nor touches LRU order nor splits") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens a = Range(12, 0), b = Range(8, 100);
  Cache(cache, pool, 1, a);
  Cache(cache, pool, 1, b);
  CHECK(cache.Probe(1, a) == 12);
  CHECK(cache.Probe(1, Range(6, 0)) == 4);
  CHECK(cache.Probe(1, Range(3, 0)) == 0);
  CHECK(cache.Probe(9, a) == 0);
  CHECK(cache.stats().locks == 0);
  CHECK(cache.Evict(3) == 3);  // a is still the oldest
  CHECK(cache.Probe(1, a) == 0);
  CHECK(cache.Probe(1, b) == 8);
  CheckTree(cache);
}

TEST_CASE("locked and pinned paths survive eviction pressure until released") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens a = Range(12, 0), b = Range(8, 100), c = Range(8, 200), d = Range(4, 300);
  Cache(cache, pool, 1, a);
  Cache(cache, pool, 1, b);
  Cache(cache, pool, 1, c);
  Cache(cache, pool, 2, d);
  LockId lock = 0;
  // Lock only a's first two blocks; its third block stays evictable.
  PrefixMatch m = cache.MatchAndLock(1, Range(8, 0), &lock);
  CHECK(m.tokens == 8);
  LockId pin = cache.Pin(1, c);
  CHECK(pin != 0);
  CHECK(cache.Pin(1, Range(8, 900)) == 0);
  CHECK(cache.stats().locks == 2);
  CHECK(cache.stats().cached_blocks == 8);
  CHECK(cache.stats().evictable_blocks == 4);  // a's third, b's two, d

  CHECK(cache.Evict(100) == 4);
  CHECK(cache.Probe(1, a) == 8);
  CHECK(cache.Probe(1, b) == 0);
  CHECK(cache.Probe(1, c) == 8);
  CHECK(cache.Probe(2, d) == 0);
  CHECK(cache.stats().evictable_blocks == 0);
  CheckTree(cache);

  cache.Unpin(pin);
  CHECK(cache.Evict(100) == 2);
  CHECK(cache.Probe(1, c) == 0);
  CHECK(cache.Probe(1, a) == 8);
  cache.Unlock(lock);
  CHECK(cache.stats().evictable_blocks == 2);
  CHECK(cache.Evict(100) == 2);
  CHECK(pool.num_free() == 16);
  CHECK(cache.stats().cached_blocks == 0);
  CheckTree(cache);
}

TEST_CASE("a lock on a long path protects its ancestors; a shorter match splits a locked node") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs);
  Tokens a = Range(16, 0);
  Cache(cache, pool, 1, a);
  LockId long_lock = 0, short_lock = 0;
  cache.MatchAndLock(1, a, &long_lock);
  cache.MatchAndLock(1, Range(8, 0), &short_lock);  // splits the locked edge
  CheckTree(cache);
  CHECK(cache.Evict(100) == 0);
  cache.Unlock(long_lock);
  CheckTree(cache);
  CHECK(cache.Evict(100) == 2);  // the tail past the short lock
  CHECK(cache.Probe(1, a) == 8);
  cache.Unlock(short_lock);
  CHECK(cache.Evict(100) == 2);
  CheckTree(cache);
}

TEST_CASE("evicting a block a sequence still holds does not count as freed") {
  BlockPool pool(8);
  RadixCache cache(pool, kBs);
  Tokens held = Range(4, 0), other = Range(4, 100);
  Blocks hb = Alloc(pool, 1);
  CHECK(cache.Insert(1, held, hb) == 1);  // a running sequence shares its block early
  Cache(cache, pool, 1, other);
  CHECK(cache.stats().evictable_blocks == 2);
  CHECK(cache.Evict(1) == 1);  // took `held` (older, not freed), then `other`
  CHECK(cache.stats().cached_blocks == 0);
  CHECK(pool.refcount(hb[0]) == 1);
  CHECK(pool.num_free() == 7);
  pool.Release(hb[0]);
  CHECK(pool.num_free() == 8);
  CheckTree(cache);
}

TEST_CASE("Evict of nothing, Unlock of 0, and stats on an empty cache") {
  BlockPool pool(4);
  RadixCache cache(pool, kBs);
  CHECK(cache.Evict(0) == 0);
  CHECK(cache.Evict(5) == 0);
  cache.Unlock(0);
  RadixStats s = cache.stats();
  CHECK(s.cached_blocks == 0);
  CHECK(s.evictable_blocks == 0);
  CHECK(s.locks == 0);
  CHECK(cache.CachedBlocks().empty());
  CheckTree(cache);
}

TEST_CASE("destroying the cache gives back the tree's references") {
  BlockPool pool(8);
  {
    RadixCache cache(pool, kBs);
    Cache(cache, pool, 1, Range(12, 0));
    Cache(cache, pool, 1, Concat(Range(4, 0), Range(4, 9)));
    Cache(cache, pool, 3, Range(8, 0));
    CHECK(pool.num_free() == 8 - 6);
  }
  CHECK(pool.num_free() == 8);
}

TEST_CASE("a deep chain of nodes is evicted and torn down") {
  // Single-block edges, each insert one block longer than the last, so every
  // insert adds a node under the previous one.
  constexpr int kDepth = 3000;
  BlockPool pool(kDepth);
  {
    RadixCache cache(pool, 1);
    Tokens t;
    Blocks b;  // only the last entry is new each time; the rest is cached already
    for (int i = 0; i < kDepth; ++i) {
      t.push_back(i);
      auto fresh = pool.Allocate();
      REQUIRE(fresh.has_value());
      b.push_back(*fresh);
      REQUIRE(cache.Insert(1, t, b) == 1);
      pool.Release(*fresh);
    }
    CHECK(cache.Probe(1, t) == kDepth);
    CheckTree(cache);
    CHECK(cache.Evict(kDepth / 2) == kDepth / 2);
    CHECK(cache.Probe(1, t) == kDepth - kDepth / 2);
    CHECK(pool.num_free() == kDepth / 2);
  }
  CHECK(pool.num_free() == kDepth);
}

// Three cached prompts of two blocks each under one salt, used in the order
// a, b, c (so least recently used first means a, b, c).
struct ThreePrompts {
  Tokens a = Range(8, 100), b = Range(8, 200), c = Range(8, 300);
  Blocks ba, bb, bc;
  ThreePrompts(RadixCache& cache, BlockPool& pool) {
    ba = Cache(cache, pool, 1, a);
    bb = Cache(cache, pool, 1, b);
    bc = Cache(cache, pool, 1, c);
  }
};

// Which of the three prompts still have their first block cached.
std::string Left(const RadixCache& cache, const ThreePrompts& p) {
  std::string out;
  if (cache.Probe(1, p.a) > 0) out += "a";
  if (cache.Probe(1, p.b) > 0) out += "b";
  if (cache.Probe(1, p.c) > 0) out += "c";
  return out;
}

TEST_CASE("next-use order: unexpected prefixes go first, then the furthest expected") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs, EvictOrder::kNextUse);
  ThreePrompts p(cache, pool);
  // a is expected late, b soon; c, the most recently used, is expected by no one.
  HintId ha = cache.Expect(1, p.a, 500.0);
  HintId hb = cache.Expect(1, p.b, 20.0);
  CHECK(ha != 0);
  CHECK(hb != 0);
  CHECK(cache.stats().hints == 2);
  CHECK(cache.stats().unexpected_blocks == 2);  // c's two blocks
  CheckTree(cache);
  CHECK(cache.Evict(2) == 2);
  CHECK(Left(cache, p) == "ab");  // c first, though used last
  CHECK(cache.Evict(2) == 2);
  CHECK(Left(cache, p) == "b");  // then a: expected furthest
  CheckTree(cache);
  cache.Forget(hb);
  cache.Forget(hb);  // a second Forget is ignored
  cache.Forget(ha);  // a's blocks are gone with it: already dropped
  CHECK(cache.stats().hints == 0);
  CHECK(cache.stats().unexpected_blocks == 2);
  CheckTree(cache);
}

TEST_CASE("least-recently-used order ignores expectations") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs, EvictOrder::kLru);
  ThreePrompts p(cache, pool);
  cache.Expect(1, p.a, 500.0);
  cache.Expect(1, p.b, 20.0);
  LockId lock = 0;
  cache.MatchAndLock(1, p.c, &lock);  // c becomes the most recently used
  cache.Unlock(lock);
  CHECK(cache.Evict(2) == 2);
  CHECK(Left(cache, p) == "bc");                // a, though expected
  CHECK(cache.stats().unexpected_blocks == 2);  // counted all the same
  CheckTree(cache);
}

TEST_CASE("an expectation stays on what eviction leaves of its prefix") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs, EvictOrder::kNextUse);
  Tokens shared = Range(8, 100);
  Tokens longer = Concat(shared, Range(8, 700));  // four blocks, the first two shared
  Tokens other = Concat(shared, Range(4, 900));   // a branch of three blocks
  Cache(cache, pool, 1, longer);
  Cache(cache, pool, 1, other);
  Tokens lone = Range(4, 50);
  Cache(cache, pool, 1, lone);
  HintId h = cache.Expect(1, longer, 10.0);
  REQUIRE(h != 0);
  // Unexpected first: the lone block and the other branch's own block.
  CHECK(cache.Evict(2) == 2);
  CHECK(cache.Probe(1, longer) == 16);
  CHECK(cache.Probe(1, lone) == 0);
  // Then the expected path itself, from its end; the expectation moves up.
  CHECK(cache.Evict(3) == 3);
  CHECK(cache.Probe(1, longer) == 4);
  CHECK(cache.stats().hints == 1);
  CheckTree(cache);
  CHECK(cache.Evict(1) == 1);  // the last block: the expectation goes with it
  CHECK(cache.stats().hints == 0);
  CHECK(cache.stats().cached_blocks == 0);
  cache.Forget(h);
  CheckTree(cache);
}

TEST_CASE("a locked expected path is not evicted; the lock and the hint count apart") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs, EvictOrder::kNextUse);
  ThreePrompts p(cache, pool);
  LockId pin = cache.Pin(1, p.a);
  HintId h = cache.Expect(1, p.a, 5.0);
  CHECK(cache.stats().evictable_blocks == 4);
  CHECK(cache.stats().unexpected_blocks == 4);
  CHECK(cache.Evict(16) == 4);
  CHECK(Left(cache, p) == "a");
  cache.Unpin(pin);
  CHECK(cache.stats().evictable_blocks == 2);
  CHECK(cache.stats().unexpected_blocks == 0);
  cache.Forget(h);
  CHECK(cache.stats().unexpected_blocks == 2);
  CheckTree(cache);
}

TEST_CASE("a held expectation is a pin that Unhold breaks, furthest expected first") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs, EvictOrder::kNextUse);
  ThreePrompts p(cache, pool);
  HintId ha = cache.Expect(1, p.a, 50.0, /*hold=*/true);
  HintId hb = cache.Expect(1, p.b, 500.0, /*hold=*/true);
  CHECK(cache.stats().holds == 2);
  CHECK(cache.stats().evictable_blocks == 2);  // c only
  CHECK(cache.Evict(16) == 2);
  CHECK(Left(cache, p) == "ab");
  CHECK(cache.Unhold(1) == 2);  // b: expected furthest; its two blocks
  CHECK(cache.stats().holds == 1);
  CHECK(cache.stats().hints == 2);  // the expectation stays
  CHECK(cache.Evict(16) == 2);
  CHECK(Left(cache, p) == "a");
  CheckTree(cache);
  cache.Forget(ha);  // releases the hold with the expectation
  CHECK(cache.stats().holds == 0);
  CHECK(cache.stats().evictable_blocks == 2);
  cache.Forget(hb);
  CheckTree(cache);
}

TEST_CASE("holds past max_held_blocks are only expectations") {
  BlockPool pool(16);
  RadixCache cache(pool, kBs, EvictOrder::kNextUse);
  ThreePrompts p(cache, pool);
  cache.set_max_held_blocks(3);
  HintId ha = cache.Expect(1, p.a, 50.0, /*hold=*/true);
  HintId hb = cache.Expect(1, p.b, 500.0, /*hold=*/true);  // 2 + 2 > 3: expected only
  CHECK(cache.stats().holds == 1);
  CHECK(cache.stats().held_blocks == 2);
  CHECK(cache.stats().hints == 2);
  CHECK(cache.Evict(16) == 4);  // b (expected later) and c go; a is held
  CHECK(Left(cache, p) == "a");
  CheckTree(cache);
  CHECK(cache.Unhold(1) == 2);
  CHECK(cache.stats().held_blocks == 0);
  cache.Forget(ha);
  cache.Forget(hb);
  CheckTree(cache);
}

}  // namespace
}  // namespace braid::kv
