#include "kv/block_pool.h"

#include <cassert>

namespace braid::kv {

BlockPool::BlockPool(int num_blocks) : refs_(num_blocks > 0 ? num_blocks : 0, 0) {
  // Filled in reverse so that the first Allocate calls hand out 0, 1, 2, ...:
  // a fresh pool's block tables read in order, which keeps tests and logs legible.
  free_.reserve(refs_.size());
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

std::optional<BlockId> BlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  BlockId id = free_.back();
  free_.pop_back();
  assert(refs_[id] == 0 && "a block on the free list is referenced");
  refs_[id] = 1;
  return id;
}

void BlockPool::AddRef(BlockId id) {
  assert(id >= 0 && id < num_blocks());
  // A free block can only come back through Allocate; sharing one would let
  // the next Allocate hand it to a second owner.
  assert(refs_[id] > 0 && "AddRef on a free block");
  if (refs_[id] <= 0) return;  // release builds: refuse rather than share a free block
  ++refs_[id];
}

void BlockPool::Release(BlockId id) {
  assert(id >= 0 && id < num_blocks());
  assert(refs_[id] > 0 && "Release of a free block (double release)");
  // Release builds: ignore it, since pushing the block twice onto the free
  // list would later hand it to two owners.
  if (refs_[id] <= 0) return;
  if (--refs_[id] == 0) free_.push_back(id);
}

}  // namespace braid::kv
