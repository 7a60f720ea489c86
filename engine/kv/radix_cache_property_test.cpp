// Property test: random operation sequences shaped like the serving
// scheduler's use of the pool and the prefix cache, checked after every step
// against a simple model (who holds which block, what each block was computed
// with).
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kv/radix_cache.h"

namespace braid::kv {
namespace {

constexpr int kBs = 4;
constexpr int kPoolBlocks = 48;
constexpr size_t kMaxLive = 10;
constexpr int kVocab = 4;  // tiny, so that tails also collide and diverge inside blocks

using Tokens = std::vector<int32_t>;
using Blocks = std::vector<BlockId>;

// A running request: its block table holds its own pool reference on every
// entry, the first `cached` of which came from the cache under `lock`.
struct Sequence {
  uint64_t salt = 0;
  Tokens tokens;
  Blocks blocks;  // blocks[i] holds tokens [i*kBs, (i+1)*kBs)
  size_t cached = 0;
  LockId lock = 0;
};

struct PinRecord {
  uint64_t salt = 0;
  Tokens tokens;
  Blocks blocks;  // what the pin covers
  LockId id = 0;
};

// What a block was last computed with: the side map that lets the test see
// whether the cache ever hands out a block holding other tokens.
struct Content {
  uint64_t salt = 0;
  Tokens tokens;
};

struct Counters {
  int submits = 0, hits = 0, rejected = 0, finished = 0, cancelled = 0, preempted = 0;
  int checkpoints = 0, pins = 0, evict_calls = 0, freed = 0, dropped_held = 0, inserted = 0;
  int hints = 0;
};

class Simulation {
 public:
  Simulation(uint32_t seed, EvictOrder order)
      : rng_(seed), pool_(kPoolBlocks), cache_(pool_, kBs, order) {
    // Shared prefixes, nested like a system prompt and its few-shot variants,
    // with cut points off block boundaries, plus an unrelated one and none.
    Tokens base = RandomTokens(26);
    for (size_t len : {0, 5, 8, 13, 16, 26})
      prefixes_.push_back(Tokens(base.begin(), base.begin() + len));
    prefixes_.push_back(RandomTokens(11));
  }

  void Step() {
    int op = Uniform(0, 99);
    if (op < 30) {
      if (live_.size() < kMaxLive)
        Submit();
      else
        Finish();
    } else if (op < 48) {
      Finish();
    } else if (op < 55) {
      Cancel();
    } else if (op < 70) {
      Decode();
    } else if (op < 76) {
      Checkpoint();
    } else if (op < 82) {
      Pin();
    } else if (op < 88) {
      Unpin();
    } else if (op < 91) {
      Expect();
    } else if (op < 93) {
      Forget();
    } else if (op < 94) {
      cache_.Unhold(Uniform(1, 8));
    } else {
      EvictSome(Uniform(1, 10));
    }
  }

  // Finishes or cancels every sequence, drops every pin, and evicts all.
  void Drain() {
    while (!live_.empty()) {
      if (Uniform(0, 1))
        Finish();
      else
        Cancel();
      CheckModel();
    }
    while (!pins_.empty()) {
      Unpin();
      CheckModel();
    }
    while (!hints_.empty()) {
      Forget();
      CheckModel();
    }
    CHECK(cache_.stats().hints == 0);
    RadixStats s = cache_.stats();
    CHECK(s.locks == 0);
    CHECK(s.evictable_blocks == s.cached_blocks);
    CHECK(cache_.Evict(INT_MAX) == s.cached_blocks);
    CHECK(cache_.stats().cached_blocks == 0);
    CHECK(cache_.stats().evictable_blocks == 0);
    CHECK(pool_.num_free() == kPoolBlocks);
    for (BlockId b = 0; b < kPoolBlocks; ++b) CHECK(pool_.refcount(b) == 0);
    CheckModel();
  }

  // The invariants that must hold between any two operations.
  void CheckModel() {
    Status st = cache_.CheckInvariants();
    REQUIRE_MESSAGE(st.ok(), st.ToString());

    Blocks tree = cache_.CachedBlocks();
    std::vector<int> in_tree(kPoolBlocks, 0);
    for (BlockId b : tree) {
      REQUIRE(b >= 0);
      REQUIRE(b < kPoolBlocks);
      ++in_tree[b];
    }
    RadixStats stats = cache_.stats();
    CHECK(static_cast<int>(tree.size()) == stats.cached_blocks);
    CHECK(stats.evictable_blocks <= stats.cached_blocks);
    CHECK(stats.unexpected_blocks <= stats.evictable_blocks);
    CHECK(stats.hints <= static_cast<int>(hints_.size()));  // eviction may drop some

    std::vector<int> holders(kPoolBlocks, 0);
    int seq_locks = 0;
    for (const Sequence& s : live_) {
      for (BlockId b : s.blocks) ++holders[b];
      if (s.lock != 0) ++seq_locks;
    }
    CHECK(stats.locks == seq_locks + static_cast<int>(pins_.size()));

    int referenced = 0;
    for (BlockId b = 0; b < kPoolBlocks; ++b) {
      CHECK_MESSAGE(in_tree[b] <= 1, "block ", b, " is in the tree twice");
      CHECK_MESSAGE(pool_.refcount(b) == holders[b] + in_tree[b], "refcount of block ", b);
      // Sequences only share blocks through the cache, under a lock.
      if (holders[b] > 1) CHECK_MESSAGE(in_tree[b] == 1, "block ", b, " shared outside the tree");
      if (pool_.refcount(b) > 0) ++referenced;
    }
    CHECK(pool_.num_free() + referenced == kPoolBlocks);

    // Locked paths are intact: the cache still maps each locked prefix to the
    // very blocks the sequence took, and they still hold those tokens.
    for (const Sequence& s : live_) {
      PrefixMatch m = cache_.Lookup(s.salt, s.tokens);
      REQUIRE(m.blocks.size() >= s.cached);
      CHECK(std::equal(s.blocks.begin(), s.blocks.begin() + s.cached, m.blocks.begin()));
      CheckContents(s.salt, s.tokens, m.blocks);
    }
    for (const PinRecord& p : pins_) {
      PrefixMatch m = cache_.Lookup(p.salt, p.tokens);
      REQUIRE(m.blocks.size() >= p.blocks.size());
      CHECK(std::equal(p.blocks.begin(), p.blocks.end(), m.blocks.begin()));
      CheckContents(p.salt, p.tokens, m.blocks);
    }
  }

  const Counters& counters() const { return n_; }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  Tokens RandomTokens(int n) {
    Tokens t(n);
    for (auto& x : t) x = Uniform(0, kVocab - 1);
    return t;
  }

  Tokens RandomPrompt() {
    Tokens t = prefixes_[Uniform(0, static_cast<int>(prefixes_.size()) - 1)];
    Tokens tail = RandomTokens(Uniform(0, 14));
    t.insert(t.end(), tail.begin(), tail.end());
    return t;
  }

  uint64_t RandomSalt() { return static_cast<uint64_t>(Uniform(1, 3)) * 0x9e3779b97f4a7c15ull; }

  static Tokens Slice(const Tokens& t, size_t block) {
    size_t lo = block * kBs;
    size_t hi = std::min(t.size(), lo + kBs);
    return Tokens(t.begin() + lo, t.begin() + hi);
  }

  // Every matched block was computed with exactly this salt and these tokens.
  void CheckContents(uint64_t salt, const Tokens& tokens, const Blocks& blocks) {
    REQUIRE(blocks.size() * kBs <= tokens.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
      const Content& c = content_[blocks[i]];
      CHECK_MESSAGE(c.salt == salt, "block ", blocks[i], " crossed salts");
      CHECK_MESSAGE(c.tokens == Slice(tokens, i), "block ", blocks[i], " holds other tokens");
    }
  }

  // "Computes" blocks [from, end) of s: records what they now hold.
  void Compute(const Sequence& s, size_t from) {
    for (size_t i = from; i < s.blocks.size(); ++i)
      content_[s.blocks[i]] = {s.salt, Slice(s.tokens, i)};
  }

  static size_t BlocksFor(size_t tokens) { return (tokens + kBs - 1) / kBs; }

  // Allocates blocks until s covers its tokens, evicting from the cache when
  // the pool runs dry. False when even eviction cannot make room.
  bool Grow(Sequence& s) {
    while (s.blocks.size() < BlocksFor(s.tokens.size())) {
      if (auto b = pool_.Allocate()) {
        s.blocks.push_back(*b);
        continue;
      }
      int want = static_cast<int>(BlocksFor(s.tokens.size()) - s.blocks.size());
      if (EvictSome(want) == 0) return false;
    }
    return true;
  }

  int EvictSome(int k) {
    RadixStats before = cache_.stats();
    int free_before = pool_.num_free();
    int freed = cache_.Evict(k);
    RadixStats after = cache_.stats();
    ++n_.evict_calls;
    n_.freed += freed;
    CHECK(freed >= 0);
    CHECK(freed <= k);
    CHECK(pool_.num_free() - free_before == freed);
    int dropped = before.cached_blocks - after.cached_blocks;
    CHECK(dropped >= freed);
    n_.dropped_held += dropped - freed;
    // It stops short only when nothing evictable is left.
    if (freed < k) CHECK(after.evictable_blocks == 0);
    return freed;
  }

  void ReleaseAndUnlock(Sequence& s) {
    for (BlockId b : s.blocks) pool_.Release(b);
    cache_.Unlock(s.lock);
  }

  size_t PickLive() { return static_cast<size_t>(Uniform(0, static_cast<int>(live_.size()) - 1)); }

  void Submit() {
    ++n_.submits;
    Sequence s;
    s.salt = RandomSalt();
    s.tokens = RandomPrompt();
    int probed = cache_.Probe(s.salt, s.tokens);
    PrefixMatch m = cache_.MatchAndLock(s.salt, s.tokens, &s.lock);
    CHECK(m.tokens == probed);
    CHECK(m.tokens == static_cast<int>(m.blocks.size()) * kBs);
    CHECK(m.blocks.size() <= s.tokens.size() / kBs);
    CHECK((s.lock == 0) == m.blocks.empty());
    CheckContents(s.salt, s.tokens, m.blocks);
    if (!m.blocks.empty()) ++n_.hits;
    for (BlockId b : m.blocks) pool_.AddRef(b);
    s.blocks = m.blocks;
    s.cached = m.blocks.size();
    if (!Grow(s)) {
      ++n_.rejected;
      ReleaseAndUnlock(s);
      return;
    }
    Compute(s, s.cached);
    live_.push_back(std::move(s));
  }

  // Offers s's full blocks to the cache; checks Insert's count against the
  // cached prefix it found, and that the whole range is cached afterwards.
  void Offer(const Sequence& s) {
    size_t full = s.tokens.size() / kBs;
    size_t had = static_cast<size_t>(cache_.Probe(s.salt, s.tokens) / kBs);
    int added = cache_.Insert(s.salt, s.tokens, s.blocks);
    n_.inserted += added;
    CHECK(added == static_cast<int>(full - had));
    PrefixMatch m = cache_.Lookup(s.salt, s.tokens);
    CHECK(m.blocks.size() == full);
    CheckContents(s.salt, s.tokens, m.blocks);
    // Newly added ranges hold the sequence's own blocks.
    for (size_t i = had; i < full; ++i) CHECK(m.blocks[i] == s.blocks[i]);
  }

  void Finish() {
    if (live_.empty()) return;
    size_t i = PickLive();
    Sequence s = std::move(live_[i]);
    live_.erase(live_.begin() + static_cast<long>(i));
    Offer(s);
    ReleaseAndUnlock(s);
    ++n_.finished;
  }

  void Cancel() {
    if (live_.empty()) return;
    size_t i = PickLive();
    ReleaseAndUnlock(live_[i]);
    live_.erase(live_.begin() + static_cast<long>(i));
    ++n_.cancelled;
  }

  // Generates a few tokens; preempted (everything released) when no block
  // can be found for them.
  void Decode() {
    if (live_.empty()) return;
    size_t i = PickLive();
    Sequence& s = live_[i];
    size_t first_touched = s.tokens.size() / kBs;  // the partial block, or the next one
    Tokens more = RandomTokens(Uniform(1, 6));
    s.tokens.insert(s.tokens.end(), more.begin(), more.end());
    if (!Grow(s)) {
      ++n_.preempted;
      ReleaseAndUnlock(s);
      live_.erase(live_.begin() + static_cast<long>(i));
      return;
    }
    Compute(s, first_touched);
  }

  // A running sequence shares its full blocks early (after prefill), keeping
  // its references and running on without a lock on the new part: the cache
  // may then evict blocks the sequence still holds.
  void Checkpoint() {
    if (live_.empty()) return;
    ++n_.checkpoints;
    Offer(live_[PickLive()]);
  }

  void Pin() {
    PinRecord p;
    if (!live_.empty() && Uniform(0, 1)) {
      const Sequence& s = live_[PickLive()];
      p.salt = s.salt;
      p.tokens = s.tokens;
    } else {
      p.salt = RandomSalt();
      p.tokens = RandomPrompt();
    }
    p.blocks = cache_.Lookup(p.salt, p.tokens).blocks;
    p.id = cache_.Pin(p.salt, p.tokens);
    CHECK((p.id == 0) == p.blocks.empty());
    if (p.id != 0) {
      ++n_.pins;
      pins_.push_back(std::move(p));
    }
  }

  // An expected read of a live sequence's prompt or a random one, at a
  // random time.
  void Expect() {
    uint64_t salt = RandomSalt();
    Tokens tokens = RandomPrompt();
    if (!live_.empty() && Uniform(0, 1)) {
      const Sequence& s = live_[PickLive()];
      salt = s.salt;
      tokens = s.tokens;
    }
    const bool cached = !cache_.Lookup(salt, tokens).blocks.empty();
    HintId id = cache_.Expect(salt, tokens, Uniform(0, 1000), /*hold=*/Uniform(0, 1) == 1);
    CHECK((id == 0) == !cached);
    if (id != 0) {
      ++n_.hints;
      hints_.push_back(id);
    }
  }

  void Forget() {
    if (hints_.empty()) return;
    size_t i = static_cast<size_t>(Uniform(0, static_cast<int>(hints_.size()) - 1));
    cache_.Forget(hints_[i]);
    hints_.erase(hints_.begin() + static_cast<long>(i));
  }

  void Unpin() {
    if (pins_.empty()) return;
    size_t i = static_cast<size_t>(Uniform(0, static_cast<int>(pins_.size()) - 1));
    cache_.Unpin(pins_[i].id);
    pins_.erase(pins_.begin() + static_cast<long>(i));
  }

  std::mt19937 rng_;
  BlockPool pool_;
  RadixCache cache_;
  std::vector<Tokens> prefixes_;
  std::vector<Sequence> live_;
  std::vector<PinRecord> pins_;
  std::vector<HintId> hints_;  // some may have been dropped by eviction
  std::map<BlockId, Content> content_;
  Counters n_;
};

TEST_CASE("random scheduler-like operations keep pool and cache consistent") {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    CAPTURE(seed);
    // Odd seeds evict least recently used first, even ones by expected use.
    Simulation sim(seed, seed % 2 ? EvictOrder::kLru : EvictOrder::kNextUse);
    sim.CheckModel();
    for (int step = 0; step < 10000; ++step) {
      CAPTURE(step);
      sim.Step();
      sim.CheckModel();
    }
    sim.Drain();

    // The run exercised what it claims to: hits, pressure, rejections,
    // evictions of blocks still held by a sequence.
    const Counters& n = sim.counters();
    MESSAGE("seed ", seed, ": submits ", n.submits, ", hits ", n.hits, ", rejected ", n.rejected,
            ", finished ", n.finished, ", cancelled ", n.cancelled, ", preempted ", n.preempted,
            ", checkpoints ", n.checkpoints, ", pins ", n.pins, ", evict calls ", n.evict_calls,
            ", freed ", n.freed, ", evicted while held ", n.dropped_held, ", inserted ",
            n.inserted);
    CHECK(n.hits > 100);
    CHECK(n.rejected > 0);
    CHECK(n.preempted > 0);
    CHECK(n.freed > 100);
    CHECK(n.dropped_held > 0);
    CHECK(n.pins > 50);
    CHECK(n.hints > 50);
  }
}

}  // namespace
}  // namespace braid::kv
