#include "kv/kv_tier.h"

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "kv/block_pool.h"
#include "kv/radix_cache.h"

namespace braid::kv {
namespace {

constexpr int kBs = 4;

std::vector<int32_t> Range(int n, int32_t start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = start + i;
  return t;
}

std::unique_ptr<KvTier> Tier(int slots) {
  auto t = KvTier::Create(slots, 64, kBs);
  REQUIRE(t.ok());
  return std::move(*t);
}

// Stores the whole blocks of `tokens` under `salt` as a chain; returns the slots.
std::vector<SlotId> StoreChain(KvTier& tier, uint64_t salt, const std::vector<int32_t>& tokens) {
  std::vector<SlotId> out;
  uint64_t parent = RadixCache::ChainSeed(salt);
  for (size_t at = 0; at + kBs <= tokens.size(); at += kBs) {
    std::span<const int32_t> block(tokens.data() + at, kBs);
    out.push_back(tier.Store(salt, parent, block));
    parent = RadixCache::ChainHash(parent, block);
  }
  return out;
}

TEST_CASE("the tier finds a stored chain in order, per salt and only on equal tokens") {
  auto tier = Tier(8);
  const auto tokens = Range(12, 100);
  const std::vector<SlotId> stored = StoreChain(*tier, 7, tokens);
  REQUIRE(stored.size() == 3);
  for (SlotId s : stored) CHECK(s >= 0);
  // Distinct slots, each writable.
  for (size_t i = 0; i < stored.size(); ++i) std::memset(tier->data(stored[i]), int(i) + 1, 64);
  CHECK(tier->CheckInvariants().ok());

  const uint64_t seed = RadixCache::ChainSeed(7);
  CHECK(tier->Probe(7, seed, tokens) == 3);
  CHECK(tier->Probe(8, RadixCache::ChainSeed(8), tokens) == 0);  // another tenant
  CHECK(tier->Probe(8, seed, tokens) == 0);                      // salt checked, not just the key
  auto other = tokens;
  other[5] = 1;  // second block differs
  CHECK(tier->Probe(7, seed, other) == 1);
  // A continuation lookup: from the first block's key on.
  const uint64_t first = RadixCache::ChainHash(seed, std::span<const int32_t>(tokens).first(kBs));
  CHECK(tier->Probe(7, first, std::span<const int32_t>(tokens).subspan(kBs)) == 2);

  std::vector<SlotId> m = tier->Match(7, seed, tokens);
  CHECK(m == stored);
  CHECK(tier->data(m[2])[0] == 3);
  CHECK(tier->stats().pinned == 3);
  CHECK(tier->CheckInvariants().ok());
  for (SlotId s : m) tier->Unpin(s);
  CHECK(tier->stats().pinned == 0);
  // Storing a held block again asks for no copy.
  CHECK(StoreChain(*tier, 7, tokens) == std::vector<SlotId>{-1, -1, -1});
  CHECK(tier->CheckInvariants().ok());
}

TEST_CASE("a full tier replaces the least recently used entry, never a pinned one") {
  auto tier = Tier(2);
  const auto a = Range(kBs, 0), b = Range(kBs, 10), c = Range(kBs, 20);
  const uint64_t seed = RadixCache::ChainSeed(0);
  const SlotId sa = tier->Store(0, seed, a);
  const SlotId sb = tier->Store(0, seed, b);
  REQUIRE(sa >= 0);
  REQUIRE(sb >= 0);
  // Use a: b is now the least recently used.
  std::vector<SlotId> pinned = tier->Match(0, seed, a);
  REQUIRE(pinned.size() == 1);
  const SlotId sc = tier->Store(0, seed, c);
  CHECK(sc == sb);
  CHECK(tier->Probe(0, seed, b) == 0);
  CHECK(tier->Probe(0, seed, a) == 1);
  CHECK(tier->stats().replaced == 1);
  // a pinned, c the only candidate; pin c too: no room at all.
  std::vector<SlotId> pc = tier->Match(0, seed, c);
  CHECK(tier->Store(0, seed, b) == -1);
  CHECK(tier->CheckInvariants().ok());
  tier->Unpin(pinned[0]);
  tier->Unpin(pc[0]);
  // A failed copy drops the entry and frees its slot.
  tier->Drop(sa);
  CHECK(tier->Probe(0, seed, a) == 0);
  CHECK(tier->stats().used == 1);
  CHECK(tier->stats().dropped == 1);
  CHECK(tier->CheckInvariants().ok());
}

TEST_CASE("the radix cache hands each evicted block to its sink with the chain key") {
  BlockPool pool(8);
  RadixCache cache(pool, kBs);
  auto tier = Tier(8);
  struct Seen {
    uint64_t salt, parent;
    std::vector<int32_t> tokens;
    BlockId block;
  };
  std::vector<Seen> seen;
  cache.set_evict_sink([&](uint64_t salt, uint64_t parent, std::span<const int32_t> t, BlockId b) {
    seen.push_back({salt, parent, {t.begin(), t.end()}, b});
    tier->Store(salt, parent, t);
  });
  const auto tokens = Range(3 * kBs, 50);
  std::vector<BlockId> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(*pool.Allocate());
  cache.Insert(9, tokens, blocks);
  for (BlockId b : blocks) pool.Release(b);
  LockId lock = 0;
  PrefixMatch m = cache.MatchAndLock(9, tokens, &lock);
  // The match's chain key is the tier's key of its last block.
  uint64_t chain = RadixCache::ChainSeed(9);
  for (int i = 0; i < 3; ++i)
    chain = RadixCache::ChainHash(chain, std::span<const int32_t>(tokens).subspan(i * kBs, kBs));
  CHECK(m.chain == chain);
  cache.Unlock(lock);
  CHECK(cache.CheckInvariants().ok());

  CHECK(cache.Evict(3) == 3);
  REQUIRE(seen.size() == 3);
  // Leaves go tail first: the last block first, its tokens and parent key.
  CHECK(seen[0].block == blocks[2]);
  CHECK(seen[0].salt == 9);
  CHECK(seen[0].tokens == std::vector<int32_t>(tokens.begin() + 2 * kBs, tokens.end()));
  CHECK(seen[2].parent == RadixCache::ChainSeed(9));
  // Everything the tree let go is in the tier, as one chain.
  CHECK(tier->Probe(9, RadixCache::ChainSeed(9), tokens) == 3);
  LockId none = 0;
  PrefixMatch empty = cache.MatchAndLock(9, tokens, &none);
  CHECK(empty.tokens == 0);
  CHECK(empty.chain == RadixCache::ChainSeed(9));
}

}  // namespace
}  // namespace braid::kv
