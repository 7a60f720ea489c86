#include "kv/radix_cache.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace braid::kv {

// One tree node. A non-root node's edge is a run of whole blocks:
// tokens.size() == blocks.size() * block_size, blocks nonempty. Roots (one per
// salt) hold no blocks and are never locked or evicted.
struct RadixCache::Node {
  Node* parent = nullptr;
  uint64_t salt = 0;  // the tenant's; at a root, the key under which Impl::roots holds it
  std::vector<int32_t> tokens;
  std::vector<BlockId> blocks;
  std::vector<uint64_t> chain;  // per block, its chain key (RadixCache::ChainHash)
  uint64_t key = 0;             // HashBlock of the first block: this node's key in parent->children
  // Keyed by the hash of the child's first block. Siblings always differ in
  // their first block (matches are whole blocks, so a shared first block
  // would have been one edge); the multimap only absorbs hash collisions.
  std::unordered_multimap<uint64_t, std::unique_ptr<Node>> children;
  // Live locks whose path runs through this node. Locking a node locks all
  // its ancestors too, so lock_count == 0 means the whole subtree is unlocked.
  int lock_count = 0;
  uint64_t last_access = 0;  // Impl::clock at the last operation that used this node
  uint64_t serial = 0;       // creation order: breaks LRU ties deterministically
  bool evictable = false;    // listed in Impl::evictable, under evict_key
  // Expectations whose path runs through this node (as lock_count), and
  // those whose path ends here.
  int hint_count = 0;
  std::vector<HintId> hints;
  // (tier, order, serial): tier 0 for leaves no expectation covers (or any
  // leaf under kLru), ordered by last_access; tier 1 for expected ones,
  // ordered by minus the soonest expected read.
  std::tuple<int, double, uint64_t> evict_key{};
};

struct RadixCache::Impl {
  // Evictable leaves in eviction order: begin() goes first.
  using EvictKey = std::tuple<int, double, uint64_t>;

  BlockPool& pool;
  const size_t bs;  // block size in tokens

  std::unordered_map<uint64_t, std::unique_ptr<Node>> roots;
  std::unordered_map<LockId, Node*> locks;  // lock -> deepest node of its path
  std::map<EvictKey, Node*> evictable;      // non-root leaves with lock_count 0
  struct Hint {
    Node* node = nullptr;  // where its path ends
    double when = 0;
    bool held = false;  // locks its path (a held node is never evicted, so never moves)
    int blocks = 0;     // of its path when it was made
  };
  int holds = 0;
  int held_blocks = 0;  // sum of held hints' blocks
  int max_held_blocks = std::numeric_limits<int>::max();
  std::unordered_map<HintId, Hint> hints;
  const EvictOrder order;
  EvictSink sink;
  uint64_t clock = 0;  // logical time: +1 per operation
  uint64_t next_serial = 1;
  LockId next_lock = 1;
  HintId next_hint = 1;
  int cached_blocks = 0;
  int unlocked_blocks = 0;  // blocks on nodes with lock_count == 0
  int open_blocks = 0;      // of those, on nodes with hint_count == 0

  Impl(BlockPool& p, int block_size, EvictOrder o)
      : pool(p), bs(static_cast<size_t>(block_size)), order(o) {}

  static bool Open(const Node& n) { return n.lock_count == 0 && n.hint_count == 0; }

  // A leaf's place in the eviction order.
  EvictKey KeyOf(const Node& n) const {
    if (order == EvictOrder::kNextUse && !n.hints.empty()) {
      double soonest = hints.at(n.hints.front()).when;
      for (HintId h : n.hints) soonest = std::min(soonest, hints.at(h).when);
      return {1, -soonest, n.serial};
    }
    return {0, static_cast<double>(n.last_access), n.serial};
  }

  // FNV-1a over the block's token ids, then a final avalanche (splitmix64)
  // so that nearby token ids spread over the hash table's buckets.
  static uint64_t HashBlock(std::span<const int32_t> block) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t t : block) {
      h ^= static_cast<uint32_t>(t);
      h *= 0x100000001b3ull;
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
  }

  // The chain key before n's first block.
  static uint64_t ChainBefore(const Node& n) {
    const Node& p = *n.parent;
    return p.parent == nullptr ? ChainSeed(p.salt) : p.chain.back();
  }

  std::span<const int32_t> FirstBlock(const Node& n) const {
    return std::span<const int32_t>(n.tokens).first(bs);
  }

  // The child of `n` whose edge starts with `block`, or nullptr.
  Node* FindChild(const Node& n, std::span<const int32_t> block) const {
    auto [lo, hi] = n.children.equal_range(HashBlock(block));
    for (auto it = lo; it != hi; ++it) {
      if (std::ranges::equal(FirstBlock(*it->second), block)) return it->second.get();
    }
    return nullptr;
  }

  // How many leading blocks of `c`'s edge equal the blocks of `rest` (which
  // holds whole blocks only).
  size_t CommonBlocks(const Node& c, std::span<const int32_t> rest) const {
    size_t n = std::min(c.blocks.size(), rest.size() / bs);
    for (size_t k = 0; k < n; ++k) {
      if (!std::equal(rest.begin() + k * bs, rest.begin() + (k + 1) * bs,
                      c.tokens.begin() + k * bs)) {
        return k;
      }
    }
    return n;
  }

  // Brings n's membership in `evictable`, and its key there, in line with
  // its state.
  void Refresh(Node* n) {
    const bool want = n->parent != nullptr && n->children.empty() && n->lock_count == 0;
    const EvictKey key = want ? KeyOf(*n) : EvictKey{};
    if (n->evictable && (!want || key != n->evict_key)) {
      evictable.erase(n->evict_key);
      n->evictable = false;
    }
    if (want && !n->evictable) {
      n->evict_key = key;
      evictable.emplace(key, n);
      n->evictable = true;
    }
  }

  void Touch(Node* n) {
    if (n->last_access == clock) return;
    n->last_access = clock;
    Refresh(n);  // the LRU position is part of the key
  }

  // Cuts c's edge after its first k blocks (0 < k < c->blocks.size()) and
  // returns the new upper node. `c` itself keeps the lower part so that locks
  // pointing at it, and its place in `evictable`, stay valid; every lock
  // through c also runs through the new node, so it inherits the lock count.
  Node* Split(Node* c, size_t k) {
    assert(k > 0 && k < c->blocks.size());
    Node* parent = c->parent;
    auto up = std::make_unique<Node>();
    up->parent = parent;
    up->tokens.assign(c->tokens.begin(), c->tokens.begin() + k * bs);
    up->blocks.assign(c->blocks.begin(), c->blocks.begin() + k);
    up->chain.assign(c->chain.begin(), c->chain.begin() + k);
    up->salt = c->salt;
    up->lock_count = c->lock_count;
    up->hint_count = c->hint_count;
    up->last_access = c->last_access;
    up->serial = next_serial++;
    up->key = c->key;
    Node* u = up.get();

    // Same first block, so same key: swap the owner in place.
    auto [lo, hi] = parent->children.equal_range(c->key);
    auto it = std::find_if(lo, hi, [c](const auto& e) { return e.second.get() == c; });
    assert(it != hi);
    std::unique_ptr<Node> lower = std::move(it->second);
    it->second = std::move(up);

    lower->tokens.erase(lower->tokens.begin(), lower->tokens.begin() + k * bs);
    lower->blocks.erase(lower->blocks.begin(), lower->blocks.begin() + k);
    lower->chain.erase(lower->chain.begin(), lower->chain.begin() + k);
    lower->parent = u;
    lower->key = HashBlock(FirstBlock(*lower));
    u->children.emplace(lower->key, std::move(lower));
    return u;
  }

  // Adds a new leaf under `parent` for whole blocks `blocks` with `tokens`;
  // the tree takes a reference on each block.
  Node* AddLeaf(Node* parent, std::span<const int32_t> tokens, std::span<const BlockId> blocks) {
    auto leaf = std::make_unique<Node>();
    leaf->parent = parent;
    leaf->tokens.assign(tokens.begin(), tokens.end());
    leaf->blocks.assign(blocks.begin(), blocks.end());
    leaf->salt = parent->salt;
    uint64_t chain = parent->parent == nullptr ? ChainSeed(parent->salt) : parent->chain.back();
    for (size_t i = 0; i < blocks.size(); ++i)
      leaf->chain.push_back(chain = ChainHash(chain, tokens.subspan(i * bs, bs)));
    leaf->last_access = clock;
    leaf->serial = next_serial++;
    for (BlockId b : blocks) pool.AddRef(b);
    cached_blocks += static_cast<int>(blocks.size());
    unlocked_blocks += static_cast<int>(blocks.size());
    open_blocks += static_cast<int>(blocks.size());
    Node* n = leaf.get();
    n->key = HashBlock(FirstBlock(*n));
    parent->children.emplace(n->key, std::move(leaf));
    Refresh(parent);
    Refresh(n);
    return n;
  }

  // Follows `tokens` (whole blocks only) down from the root of `salt`,
  // appending the blocks of the longest cached prefix to `out`. Cuts the last
  // edge when the match ends inside it, so the returned node (the deepest of
  // the match; nullptr when nothing matched) covers exactly the matched
  // blocks, and marks the path as used now.
  Node* MatchPath(uint64_t salt, std::span<const int32_t> tokens, std::vector<BlockId>* out) {
    auto r = roots.find(salt);
    if (r == roots.end()) return nullptr;
    Node* node = r->second.get();
    std::span<const int32_t> rest = tokens.first(tokens.size() / bs * bs);
    while (!rest.empty()) {
      Node* child = FindChild(*node, rest.first(bs));
      if (child == nullptr) break;
      size_t k = CommonBlocks(*child, rest);  // >= 1: the first block matched
      bool partial = k < child->blocks.size();
      if (partial) child = Split(child, k);
      Touch(child);
      out->insert(out->end(), child->blocks.begin(), child->blocks.end());
      node = child;
      if (partial) break;
      rest = rest.subspan(k * bs);
    }
    return node->parent ? node : nullptr;
  }

  // MatchPath's read-only twin: neither splits nor touches. Returns the
  // number of matched blocks and appends them to `out` when given.
  size_t PeekPath(uint64_t salt, std::span<const int32_t> tokens, std::vector<BlockId>* out) const {
    auto r = roots.find(salt);
    if (r == roots.end()) return 0;
    const Node* node = r->second.get();
    std::span<const int32_t> rest = tokens.first(tokens.size() / bs * bs);
    size_t matched = 0;
    while (!rest.empty()) {
      const Node* child = FindChild(*node, rest.first(bs));
      if (child == nullptr) break;
      size_t k = CommonBlocks(*child, rest);
      if (out) out->insert(out->end(), child->blocks.begin(), child->blocks.begin() + k);
      matched += k;
      if (k < child->blocks.size()) break;
      node = child;
      rest = rest.subspan(k * bs);
    }
    return matched;
  }

  void LockPath(Node* n) {
    for (; n->parent != nullptr; n = n->parent) {
      if (Open(*n)) open_blocks -= static_cast<int>(n->blocks.size());
      if (n->lock_count++ == 0) {
        unlocked_blocks -= static_cast<int>(n->blocks.size());
        Refresh(n);
      }
    }
  }

  void UnlockPath(Node* n) {
    for (; n->parent != nullptr; n = n->parent) {
      assert(n->lock_count > 0);
      if (--n->lock_count == 0) {
        unlocked_blocks += static_cast<int>(n->blocks.size());
        Refresh(n);
      }
      if (Open(*n)) open_blocks += static_cast<int>(n->blocks.size());
    }
  }

  // Adds `delta` (+1 or -1) to the expectation count of every node from `n`
  // up, and re-keys `n` (only a leaf's own expectations order it).
  void HintPath(Node* n, int delta) {
    Refresh(n);
    for (; n->parent != nullptr; n = n->parent) {
      if (Open(*n)) open_blocks -= static_cast<int>(n->blocks.size());
      n->hint_count += delta;
      assert(n->hint_count >= 0);
      if (Open(*n)) open_blocks += static_cast<int>(n->blocks.size());
    }
  }

  // Drops the last block of an evictable leaf, and the leaf itself when that
  // was its only block. Returns whether the block went back to the free list
  // (it does not while a running sequence still holds its own reference).
  bool EvictTail(Node* leaf) {
    assert(leaf->evictable);
    BlockId b = leaf->blocks.back();
    if (sink) {
      const size_t n = leaf->blocks.size();
      const uint64_t parent = n > 1 ? leaf->chain[n - 2] : ChainBefore(*leaf);
      sink(leaf->salt, parent, std::span<const int32_t>(leaf->tokens).last(bs), b);
    }
    bool frees = pool.refcount(b) == 1;
    pool.Release(b);
    leaf->blocks.pop_back();
    leaf->chain.pop_back();
    leaf->tokens.resize(leaf->tokens.size() - bs);
    --cached_blocks;
    --unlocked_blocks;
    if (leaf->hint_count == 0) --open_blocks;
    if (leaf->blocks.empty()) RemoveLeaf(leaf);
    return frees;
  }

  // Unlinks and destroys an empty leaf; its parent may become an evictable
  // leaf, and a root left without children is dropped.
  // Expectations that ended at the leaf now end at its parent (what is left
  // of their prefix); at a root, nothing of theirs is cached and they go.
  void RemoveLeaf(Node* leaf) {
    evictable.erase(leaf->evict_key);
    leaf->evictable = false;
    Node* parent = leaf->parent;
    for (HintId h : leaf->hints) {
      if (parent->parent == nullptr) {
        hints.erase(h);
      } else {
        hints.at(h).node = parent;
        parent->hints.push_back(h);
      }
    }
    // Only hash collisions share the key, so this scan is short even under
    // a root with thousands of children.
    auto [lo, hi] = parent->children.equal_range(leaf->key);
    auto it = std::find_if(lo, hi, [leaf](const auto& e) { return e.second.get() == leaf; });
    assert(it != hi);
    parent->children.erase(it);
    if (parent->parent == nullptr) {
      if (parent->children.empty()) roots.erase(parent->salt);
    } else {
      Refresh(parent);
    }
  }

  // Calls f(node) for every node (roots included), iteratively: a long
  // prompt makes a deep chain, and recursion would bound the depth by the stack.
  template <typename F>
  void ForEachNode(F&& f) const {
    std::vector<const Node*> stack;
    for (const auto& [salt, root] : roots) stack.push_back(root.get());
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      f(*n);
      for (const auto& [key, child] : n->children) stack.push_back(child.get());
    }
  }
};

RadixCache::RadixCache(BlockPool& pool, int block_size, EvictOrder order)
    : impl_(std::make_unique<Impl>(pool, block_size, order)), pool_(pool), block_size_(block_size) {
  assert(block_size > 0);
}

EvictOrder RadixCache::order() const { return impl_->order; }

uint64_t RadixCache::ChainSeed(uint64_t salt) {
  // splitmix64 of the salt, so that salt 0 does not seed with 0.
  uint64_t h = salt + 0x9e3779b97f4a7c15ull;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

uint64_t RadixCache::ChainHash(uint64_t parent, std::span<const int32_t> block) {
  return Impl::HashBlock(block) ^ (parent * 0x9e3779b97f4a7c15ull + (parent >> 29));
}

void RadixCache::set_evict_sink(EvictSink sink) { impl_->sink = std::move(sink); }

RadixCache::~RadixCache() {
  // Give back the tree's references, and tear the tree down without recursion.
  std::vector<std::unique_ptr<Node>> doomed;
  for (auto& [salt, root] : impl_->roots) doomed.push_back(std::move(root));
  impl_->roots.clear();
  while (!doomed.empty()) {
    std::unique_ptr<Node> n = std::move(doomed.back());
    doomed.pop_back();
    for (BlockId b : n->blocks) pool_.Release(b);
    for (auto& [key, child] : n->children) doomed.push_back(std::move(child));
  }
}

PrefixMatch RadixCache::MatchAndLock(uint64_t salt, std::span<const int32_t> tokens, LockId* lock) {
  assert(lock != nullptr);
  ++impl_->clock;
  PrefixMatch m;
  Node* end = impl_->MatchPath(salt, tokens, &m.blocks);
  m.tokens = static_cast<int>(m.blocks.size()) * block_size_;
  m.chain = end != nullptr ? end->chain.back() : ChainSeed(salt);
  *lock = 0;
  if (end == nullptr) return m;
  m.expected = end->hint_count > 0;
  impl_->LockPath(end);
  LockId id = impl_->next_lock++;
  impl_->locks.emplace(id, end);
  *lock = id;
  return m;
}

int RadixCache::Probe(uint64_t salt, std::span<const int32_t> tokens) const {
  return static_cast<int>(impl_->PeekPath(salt, tokens, nullptr)) * block_size_;
}

PrefixMatch RadixCache::Lookup(uint64_t salt, std::span<const int32_t> tokens) const {
  PrefixMatch m;
  m.tokens = static_cast<int>(impl_->PeekPath(salt, tokens, &m.blocks)) * block_size_;
  return m;
}

void RadixCache::Unlock(LockId lock) {
  if (lock == 0) return;  // "no lock", as MatchAndLock and Pin return on a miss
  auto it = impl_->locks.find(lock);
  assert(it != impl_->locks.end() && "Unlock of an unknown or already released lock");
  if (it == impl_->locks.end()) return;
  impl_->UnlockPath(it->second);
  impl_->locks.erase(it);
}

int RadixCache::Insert(uint64_t salt, std::span<const int32_t> tokens,
                       std::span<const BlockId> blocks) {
  Impl& im = *impl_;
  // Only whole blocks that have both an id and all their tokens.
  size_t n = std::min(blocks.size(), tokens.size() / im.bs);
  if (n == 0) return 0;
  ++im.clock;
  auto [r, created] = im.roots.try_emplace(salt);
  if (created) {
    r->second = std::make_unique<Node>();
    r->second->salt = salt;
    r->second->serial = im.next_serial++;
  }
  Node* node = r->second.get();
  size_t i = 0;  // blocks already on the path
  while (i < n) {
    std::span<const int32_t> rest = tokens.subspan(i * im.bs, (n - i) * im.bs);
    Node* child = im.FindChild(*node, rest.first(im.bs));
    if (child == nullptr) {
      im.AddLeaf(node, rest, blocks.subspan(i, n - i));
      return static_cast<int>(n - i);
    }
    size_t k = im.CommonBlocks(*child, rest);
    if (k < child->blocks.size()) {
      if (i + k == n) {
        // The offered range ends inside this edge: all of it is cached.
        im.Touch(child);
        return 0;
      }
      child = im.Split(child, k);  // diverges after k blocks: branch off there
    }
    im.Touch(child);
    node = child;
    i += k;
  }
  return 0;
}

LockId RadixCache::Pin(uint64_t salt, std::span<const int32_t> tokens) {
  LockId lock = 0;
  MatchAndLock(salt, tokens, &lock);
  return lock;
}

HintId RadixCache::Expect(uint64_t salt, std::span<const int32_t> tokens, double when, bool hold) {
  Impl& im = *impl_;
  ++im.clock;
  std::vector<BlockId> blocks;
  Node* end = im.MatchPath(salt, tokens, &blocks);
  if (end == nullptr) return 0;
  const HintId id = im.next_hint++;
  const int n = static_cast<int>(blocks.size());
  if (hold && im.held_blocks + n > im.max_held_blocks) hold = false;
  im.hints.emplace(id, Impl::Hint{end, when, hold, n});
  end->hints.push_back(id);
  im.HintPath(end, +1);
  if (hold) {
    im.LockPath(end);
    ++im.holds;
    im.held_blocks += n;
  }
  return id;
}

void RadixCache::Forget(HintId hint) {
  Impl& im = *impl_;
  auto it = im.hints.find(hint);
  if (it == im.hints.end()) return;
  Node* n = it->second.node;
  const bool held = it->second.held;
  const int blocks = it->second.blocks;
  im.hints.erase(it);
  n->hints.erase(std::find(n->hints.begin(), n->hints.end(), hint));
  if (held) {
    im.UnlockPath(n);
    --im.holds;
    im.held_blocks -= blocks;
  }
  im.HintPath(n, -1);
}

void RadixCache::set_max_held_blocks(int blocks) { impl_->max_held_blocks = blocks; }

int RadixCache::Unhold(int blocks) {
  Impl& im = *impl_;
  std::vector<std::pair<double, HintId>> held;
  for (const auto& [id, h] : im.hints)
    if (h.held) held.emplace_back(h.when, id);
  std::sort(held.begin(), held.end(), std::greater<>());  // furthest first
  const int before = im.unlocked_blocks;
  for (const auto& [when, id] : held) {
    if (im.unlocked_blocks - before >= blocks) break;
    Impl::Hint& h = im.hints.at(id);
    h.held = false;
    --im.holds;
    im.held_blocks -= h.blocks;
    im.UnlockPath(h.node);
  }
  return im.unlocked_blocks - before;
}

int RadixCache::Evict(int n) {
  Impl& im = *impl_;
  int freed = 0;
  while (freed < n && !im.evictable.empty()) {
    if (im.EvictTail(im.evictable.begin()->second)) ++freed;
  }
  return freed;
}

RadixStats RadixCache::stats() const {
  RadixStats s;
  s.cached_blocks = impl_->cached_blocks;
  s.evictable_blocks = impl_->unlocked_blocks;
  s.locks = static_cast<int>(impl_->locks.size());
  s.unexpected_blocks = impl_->open_blocks;
  s.hints = static_cast<int>(impl_->hints.size());
  s.holds = impl_->holds;
  s.held_blocks = impl_->held_blocks;
  return s;
}

std::vector<BlockId> RadixCache::CachedBlocks() const {
  std::vector<BlockId> out;
  impl_->ForEachNode(
      [&](const Node& n) { out.insert(out.end(), n.blocks.begin(), n.blocks.end()); });
  return out;
}

Status RadixCache::CheckInvariants() const {
  const Impl& im = *impl_;
  std::unordered_map<const Node*, int> want_locks, want_hints;
  for (const auto& [id, n] : im.locks) {
    if (id == 0 || id >= im.next_lock) return Status::Internal("lock id out of range");
    for (const Node* p = n; p->parent != nullptr; p = p->parent) ++want_locks[p];
  }
  int held = 0, held_blocks = 0;
  for (const auto& [id, h] : im.hints) {
    if (id == 0 || id >= im.next_hint) return Status::Internal("hint id out of range");
    if (h.held) {
      ++held;
      held_blocks += h.blocks;
      for (const Node* p = h.node; p->parent != nullptr; p = p->parent) ++want_locks[p];
    }
    if (std::find(h.node->hints.begin(), h.node->hints.end(), id) == h.node->hints.end())
      return Status::Internal("an expectation is missing from its node's list");
    for (const Node* p = h.node; p->parent != nullptr; p = p->parent) ++want_hints[p];
  }
  std::unordered_set<BlockId> seen;
  std::unordered_set<const Node*> nodes;
  int cached = 0, unlocked = 0, open = 0, leaves = 0, listed_hints = 0;
  std::string err;
  auto fail = [&](const std::string& what) {
    if (err.empty()) err = what;
  };
  im.ForEachNode([&](const Node& n) {
    nodes.insert(&n);
    for (const auto& [key, child] : n.children) {
      if (child->parent != &n) fail("child's parent link is wrong");
      if (child->blocks.empty() || key != child->key ||
          key != im.HashBlock(im.FirstBlock(*child))) {
        fail("child is keyed by something other than its first block");
      } else if (im.FindChild(n, im.FirstBlock(*child)) != child.get()) {
        fail("two siblings share a first block");
      }
      if (child->last_access > n.last_access && n.parent != nullptr) {
        fail("a child was used more recently than its parent");
      }
    }
    if (n.parent == nullptr) {
      auto r = im.roots.find(n.salt);
      if (r == im.roots.end() || r->second.get() != &n) fail("root not registered under its salt");
      if (!n.blocks.empty() || n.lock_count != 0) fail("root holds blocks or locks");
      if (n.children.empty()) fail("empty root not dropped");
      if (n.evictable) fail("root marked evictable");
      return;
    }
    if (n.blocks.empty()) fail("non-root node without blocks");
    if (n.tokens.size() != n.blocks.size() * im.bs) fail("edge tokens do not fill its blocks");
    if (n.chain.size() != n.blocks.size()) {
      fail("a node's chain keys do not match its blocks");
    } else {
      uint64_t c = Impl::ChainBefore(n);
      for (size_t i = 0; i < n.chain.size(); ++i)
        if (n.chain[i] !=
            (c = ChainHash(c, std::span<const int32_t>(n.tokens).subspan(i * im.bs, im.bs))))
          fail("a chain key differs from its tokens' and parent's");
      if (n.salt != n.parent->salt) fail("a node's salt differs from its parent's");
    }
    auto w = want_locks.find(&n);
    if (n.lock_count != (w == want_locks.end() ? 0 : w->second)) {
      fail("lock count differs from the live locks through the node");
    }
    auto h = want_hints.find(&n);
    if (n.hint_count != (h == want_hints.end() ? 0 : h->second))
      fail("expectation count differs from the live expectations through the node");
    listed_hints += static_cast<int>(n.hints.size());
    cached += static_cast<int>(n.blocks.size());
    if (n.lock_count == 0) unlocked += static_cast<int>(n.blocks.size());
    if (Impl::Open(n)) open += static_cast<int>(n.blocks.size());
    bool should = n.children.empty() && n.lock_count == 0;
    if (should != n.evictable) fail("evictable flag out of date");
    if (n.evictable) {
      ++leaves;
      auto e = im.evictable.find(n.evict_key);
      if (e == im.evictable.end() || e->second != &n)
        fail("evictable leaf missing from the eviction index");
      if (n.evict_key != im.KeyOf(n)) fail("evictable leaf keyed out of order");
    }
    for (BlockId b : n.blocks) {
      if (b < 0 || b >= im.pool.num_blocks()) {
        fail("block id out of range");
        continue;
      }
      if (!seen.insert(b).second) fail("block " + std::to_string(b) + " is in the tree twice");
      if (im.pool.refcount(b) < 1)
        fail("tree block " + std::to_string(b) + " has no pool reference");
    }
  });
  if (!err.empty()) return Status::Internal(err);
  for (const auto& [id, n] : im.locks) {
    if (!nodes.count(n)) return Status::Internal("a lock points at a node no longer in the tree");
  }
  if (leaves != static_cast<int>(im.evictable.size())) {
    return Status::Internal("LRU index lists nodes that are not evictable leaves");
  }
  if (cached != im.cached_blocks) return Status::Internal("cached_blocks counter is off");
  if (unlocked != im.unlocked_blocks) return Status::Internal("evictable_blocks counter is off");
  if (open != im.open_blocks) return Status::Internal("unexpected_blocks counter is off");
  if (held != im.holds) return Status::Internal("holds counter is off");
  if (held_blocks != im.held_blocks) return Status::Internal("held_blocks counter is off");
  if (listed_hints != static_cast<int>(im.hints.size()))
    return Status::Internal("nodes list expectations that are not live");
  return Status::Ok();
}

}  // namespace braid::kv
