#include "remote/prefix_memory.h"

namespace braid::remote {
namespace {

// 64-bit mixing of one value into a running hash (the splitmix64 finalizer
// over the xor), enough to keep unrelated prefixes apart.
uint64_t Mix(uint64_t h, uint64_t v) {
  uint64_t x = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<uint64_t> PrefixMemory::Chain(const std::vector<int32_t>& tokens, uint64_t salt) {
  std::vector<uint64_t> out;
  uint64_t h = Mix(0x62726169640aull, salt);
  const size_t blocks = tokens.size() / kBlockTokens;
  out.reserve(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t i = b * kBlockTokens; i < (b + 1) * kBlockTokens; ++i)
      h = Mix(h, static_cast<uint32_t>(tokens[i]));
    out.push_back(h);
  }
  return out;
}

void PrefixMemory::Remember(const std::vector<int32_t>& tokens, uint64_t salt) {
  if (capacity_ == 0) return;
  // Tail blocks first, so that a prompt's head is the most recent and is
  // forgotten last (a prefix is useless without the blocks before it).
  const std::vector<uint64_t> chain = Chain(tokens, salt);
  for (auto c = chain.rbegin(); c != chain.rend(); ++c) {
    const uint64_t h = *c;
    auto it = index_.find(h);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      continue;
    }
    lru_.push_front(h);
    index_[h] = lru_.begin();
    if (index_.size() > capacity_) {
      index_.erase(lru_.back());
      lru_.pop_back();
    }
  }
}

int PrefixMemory::LongestPrefix(const std::vector<int32_t>& tokens, uint64_t salt) const {
  int n = 0;
  // A block may have been forgotten while a later one is kept (it was sent
  // less recently): the remembered prefix ends at the first gap.
  for (uint64_t h : Chain(tokens, salt)) {
    if (!index_.count(h)) break;
    n += kBlockTokens;
  }
  return n;
}

}  // namespace braid::remote
