#include "kv/block_pool.h"

#include <cassert>

namespace braid::kv {

BlockPool::BlockPool(int num_blocks, int num_slides) : refs_(num_blocks > 0 ? num_blocks : 0, 0) {
  // Filled in reverse so that the first Allocate calls hand out 0, 1, 2, ...:
  // a fresh pool's block tables read in order, which keeps tests and logs legible.
  free_.reserve(refs_.size());
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
  if (num_slides > 0) {
    num_slides_ = num_slides;
    slide_of_.assign(refs_.size(), kNoSlide);
    slide_holds_.assign(refs_.size(), 0);
    for (int i = num_slides - 1; i >= 0; --i) free_slides_.push_back(i);
  }
}

std::optional<int32_t> BlockPool::TakeSlide() {
  if (free_slides_.empty()) {
    // The slide let go longest ago whose block still has it, unheld.
    while (!let_go_.empty()) {
      const BlockId b = let_go_.front();
      let_go_.pop_front();
      if (slide_of_[b] == kNoSlide || slide_holds_[b] > 0) continue;
      free_slides_.push_back(slide_of_[b]);
      slide_of_[b] = kNoSlide;
      ++taken_back_;
      break;
    }
  }
  if (free_slides_.empty()) return std::nullopt;
  const int32_t slide = free_slides_.back();
  free_slides_.pop_back();
  return slide;
}

std::optional<BlockId> BlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  std::optional<int32_t> slide;
  if (!slide_of_.empty() && !(slide = TakeSlide())) return std::nullopt;
  BlockId id = free_.back();
  free_.pop_back();
  assert(refs_[id] == 0 && "a block on the free list is referenced");
  refs_[id] = 1;
  if (slide) {
    slide_of_[id] = *slide;
    slide_holds_[id] = 1;
  }
  return id;
}

void BlockPool::HoldSlide(BlockId id) {
  if (slide_of_.empty()) return;
  assert(refs_[id] > 0 && slide_of_[id] != kNoSlide && "HoldSlide of a block without a slide");
  ++slide_holds_[id];
}

void BlockPool::DropSlide(BlockId id) {
  if (slide_of_.empty()) return;
  assert(slide_holds_[id] > 0 && "DropSlide of an unheld slide");
  if (slide_holds_[id] <= 0) return;
  if (--slide_holds_[id] > 0) return;
  let_go_.push_back(id);
  // Entries of blocks held again or freed since, and repeats, are dropped
  // once they outnumber the blocks: the queue stays within twice the pool.
  if (let_go_.size() > 2 * refs_.size() + 16) {
    std::vector<char> seen(refs_.size(), 0);
    std::deque<BlockId> kept;
    for (BlockId b : let_go_) {
      if (slide_of_[b] == kNoSlide || slide_holds_[b] > 0 || seen[b]) continue;
      seen[b] = 1;
      kept.push_back(b);
    }
    let_go_.swap(kept);
  }
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
  if (--refs_[id] > 0) return;
  free_.push_back(id);
  if (!slide_of_.empty() && slide_of_[id] != kNoSlide) {
    assert(slide_holds_[id] == 0 && "a block freed while its slide is held");
    free_slides_.push_back(slide_of_[id]);
    slide_of_[id] = kNoSlide;
    slide_holds_[id] = 0;
  }
}

}  // namespace braid::kv
