// A pool of fixed-size KV blocks identified by index, with reference counts.
//
// A block is free (refcount 0, on the free list) or held by one or more
// owners: a running sequence's block table, the radix prefix cache, or both.
// Allocate hands out a free block with refcount 1; Release drops one
// reference and returns the block to the free list when none remain.
// Not thread-safe: the step loop owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace braid::kv {

using BlockId = int32_t;
// A block-table entry whose block was let go (SeqState::dropped_blocks).
inline constexpr BlockId kNoBlock = -1;

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(refs_.size()); }
  int num_free() const { return static_cast<int>(free_.size()); }
  int refcount(BlockId id) const { return refs_[id]; }

  // A free block with refcount 1, or nullopt when none is free.
  std::optional<BlockId> Allocate();
  void AddRef(BlockId id);
  // Drops one reference; the block is free again when the count reaches 0.
  void Release(BlockId id);

 private:
  std::vector<int> refs_;
  std::vector<BlockId> free_;  // LIFO: recently freed blocks are reused first
};

}  // namespace braid::kv
