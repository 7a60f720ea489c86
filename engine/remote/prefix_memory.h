// What a remote engine remembers of the prompts it sent: each prompt as a
// chain of hashes over its full 16-token blocks (block i's hash covers the
// salt and every token up to the end of block i, so equal hashes mean equal
// prefixes), kept in a bounded set that forgets the least recently sent
// block first. The server's own cache cannot be seen; this stands in for it
// so that similar prompts keep going to the same server.
//
// Thread safety: none; the owner locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace braid::remote {

class PrefixMemory {
 public:
  static constexpr int kBlockTokens = 16;

  explicit PrefixMemory(size_t capacity_blocks = 4096) : capacity_(capacity_blocks) {}

  // Remembers every full block of `tokens` under `salt` as just used.
  void Remember(const std::vector<int32_t>& tokens, uint64_t salt);
  // The length in tokens (a multiple of kBlockTokens) of the longest
  // remembered prefix of `tokens` under `salt`.
  int LongestPrefix(const std::vector<int32_t>& tokens, uint64_t salt) const;
  size_t size() const { return index_.size(); }

 private:
  // The hashes of the full blocks of `tokens`, in order.
  static std::vector<uint64_t> Chain(const std::vector<int32_t>& tokens, uint64_t salt);

  size_t capacity_;
  std::list<uint64_t> lru_;  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index_;
};

}  // namespace braid::remote
