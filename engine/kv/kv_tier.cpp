#include "kv/kv_tier.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <string>

#include "kv/radix_cache.h"

namespace braid::kv {

Result<std::unique_ptr<KvTier>> KvTier::Create(int n_slots, size_t block_bytes, int block_size) {
  if (n_slots < 1 || block_bytes == 0 || block_size < 1)
    return Status::InvalidArgument("the host KV tier needs at least one slot of one block");
  const size_t bytes = static_cast<size_t>(n_slots) * block_bytes;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return Status::ResourceExhausted("cannot map " + std::to_string(bytes >> 20) +
                                     " MiB for the host KV tier: " + std::strerror(errno));
  return std::unique_ptr<KvTier>(new KvTier(p, bytes, n_slots, block_bytes, block_size));
}

KvTier::KvTier(void* memory, size_t bytes, int n_slots, size_t block_bytes, int block_size)
    : memory_(memory),
      bytes_(bytes),
      block_bytes_(block_bytes),
      block_size_(block_size),
      slots_(static_cast<size_t>(n_slots)) {
  free_.reserve(slots_.size());
  for (SlotId s = n_slots - 1; s >= 0; --s) free_.push_back(s);
  counts_.slots = n_slots;
}

KvTier::~KvTier() { munmap(memory_, bytes_); }

SlotId KvTier::Find(uint64_t salt, uint64_t parent, std::span<const int32_t> block) const {
  auto [lo, hi] = index_.equal_range(RadixCache::ChainHash(parent, block));
  for (auto it = lo; it != hi; ++it) {
    const Slot& s = slots_[static_cast<size_t>(it->second)];
    if (s.salt == salt && s.parent == parent && std::ranges::equal(s.tokens, block))
      return it->second;
  }
  return -1;
}

void KvTier::Touch(SlotId id) {
  Slot& s = slots_[static_cast<size_t>(id)];
  if (s.pins == 0) lru_.erase(s.tick);
  s.tick = ++clock_;
  if (s.pins == 0) lru_.emplace(s.tick, id);
}

void KvTier::Release(SlotId id) {
  Slot& s = slots_[static_cast<size_t>(id)];
  assert(s.used && s.pins == 0);
  lru_.erase(s.tick);
  auto [lo, hi] = index_.equal_range(s.key);
  index_.erase(std::find_if(lo, hi, [id](const auto& e) { return e.second == id; }));
  s = Slot{};
  free_.push_back(id);
  --counts_.used;
}

SlotId KvTier::Store(uint64_t salt, uint64_t parent, std::span<const int32_t> tokens) {
  assert(static_cast<int>(tokens.size()) == block_size_);
  if (SlotId held = Find(salt, parent, tokens); held >= 0) {
    Touch(held);
    return -1;
  }
  if (free_.empty()) {
    if (lru_.empty()) return -1;  // every entry is being read
    Release(lru_.begin()->second);
    ++counts_.replaced;
  }
  const SlotId id = free_.back();
  free_.pop_back();
  Slot& s = slots_[static_cast<size_t>(id)];
  s.used = true;
  s.salt = salt;
  s.parent = parent;
  s.key = RadixCache::ChainHash(parent, tokens);
  s.tokens.assign(tokens.begin(), tokens.end());
  s.tick = ++clock_;
  lru_.emplace(s.tick, id);
  index_.emplace(s.key, id);
  ++counts_.used;
  ++counts_.stored;
  return id;
}

std::vector<SlotId> KvTier::Match(uint64_t salt, uint64_t parent, std::span<const int32_t> tokens) {
  std::vector<SlotId> out;
  const size_t bs = static_cast<size_t>(block_size_);
  for (size_t at = 0; at + bs <= tokens.size(); at += bs) {
    const std::span<const int32_t> block = tokens.subspan(at, bs);
    const SlotId id = Find(salt, parent, block);
    if (id < 0) break;
    Touch(id);
    Slot& s = slots_[static_cast<size_t>(id)];
    if (s.pins++ == 0) {
      lru_.erase(s.tick);
      ++counts_.pinned;
    }
    out.push_back(id);
    parent = s.key;
  }
  counts_.hits += out.size();
  return out;
}

int KvTier::Probe(uint64_t salt, uint64_t parent, std::span<const int32_t> tokens) const {
  int n = 0;
  const size_t bs = static_cast<size_t>(block_size_);
  for (size_t at = 0; at + bs <= tokens.size(); at += bs, ++n) {
    const SlotId id = Find(salt, parent, tokens.subspan(at, bs));
    if (id < 0) break;
    parent = slots_[static_cast<size_t>(id)].key;
  }
  return n;
}

void KvTier::Unpin(SlotId id) {
  Slot& s = slots_[static_cast<size_t>(id)];
  assert(s.used && s.pins > 0);
  if (--s.pins > 0) return;
  --counts_.pinned;
  lru_.emplace(s.tick, id);
}

void KvTier::Drop(SlotId id) {
  Slot& s = slots_[static_cast<size_t>(id)];
  if (!s.used) return;
  if (s.pins > 0) {
    --counts_.pinned;
    s.pins = 0;
    lru_.emplace(s.tick, id);
  }
  Release(id);
  ++counts_.dropped;
}

TierStats KvTier::stats() const { return counts_; }

Status KvTier::CheckInvariants() const {
  int used = 0, pinned = 0, unpinned = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (!s.used) continue;
    ++used;
    if (static_cast<int>(s.tokens.size()) != block_size_)
      return Status::Internal("slot " + std::to_string(i) + " holds a partial block");
    if (s.key != RadixCache::ChainHash(s.parent, s.tokens))
      return Status::Internal("slot " + std::to_string(i) + " is keyed by other tokens");
    if (Find(s.salt, s.parent, s.tokens) != static_cast<SlotId>(i))
      return Status::Internal("slot " + std::to_string(i) + " is missing from the index");
    if (s.pins > 0) {
      ++pinned;
    } else {
      ++unpinned;
      auto it = lru_.find(s.tick);
      if (it == lru_.end() || it->second != static_cast<SlotId>(i))
        return Status::Internal("unpinned slot " + std::to_string(i) + " is not in LRU order");
    }
  }
  if (used != counts_.used || pinned != counts_.pinned)
    return Status::Internal("the used or pinned counter is off");
  if (unpinned != static_cast<int>(lru_.size()) || used != static_cast<int>(index_.size()))
    return Status::Internal("the LRU order or the index lists slots not in use");
  if (used + static_cast<int>(free_.size()) != n_slots())
    return Status::Internal("free list and used slots do not add up to the capacity");
  return Status::Ok();
}

}  // namespace braid::kv
