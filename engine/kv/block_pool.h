// A pool of fixed-size KV blocks identified by index, with reference counts.
//
// A block is free (refcount 0, on the free list) or held by one or more
// owners: a running sequence's block table, the radix prefix cache, or both.
// Allocate hands out a free block with refcount 1; Release drops one
// reference and returns the block to the free list when none remain.
//
// Slides (a hybrid model's sliding-window layers, kept apart): a pool made
// with slides gives every block it allocates a slide too, the storage of
// the sliding layers' share of the block, from a smaller pool of its own.
// Only queries within a window read a slide, so a block outlives its slide
// when no one holds the slide any more: a sequence holds the slides of the
// blocks its window covers (HoldSlide / DropSlide; Allocate's slide comes
// held), and a slide no one holds stays with its block (a prefix cache hit
// may still read it) until Allocate needs it, the one let go longest ago
// first. A block without a slide has slide() == kNoSlide; a block's slide
// goes back when the block is freed.
// Not thread-safe: the step loop owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace braid::kv {

using BlockId = int32_t;
// A block-table entry whose block was let go (SeqState::dropped_blocks).
inline constexpr BlockId kNoBlock = -1;
// slide() of a block that has none.
inline constexpr int32_t kNoSlide = -1;

class BlockPool {
 public:
  explicit BlockPool(int num_blocks, int num_slides = 0);

  int num_blocks() const { return static_cast<int>(refs_.size()); }
  int num_free() const { return static_cast<int>(free_.size()); }
  int refcount(BlockId id) const { return refs_[id]; }

  // A free block with refcount 1 (and, with slides, a held slide), or
  // nullopt when none is free (or no slide is free or let go).
  std::optional<BlockId> Allocate();
  void AddRef(BlockId id);
  // Drops one reference; the block is free again when the count reaches 0.
  void Release(BlockId id);

  int num_slides() const { return num_slides_; }
  int num_free_slides() const { return static_cast<int>(free_slides_.size()); }
  // The slide of allocated block `id`, or kNoSlide.
  int32_t slide(BlockId id) const { return slide_of_.empty() ? kNoSlide : slide_of_[id]; }
  // A sequence reads the slide of `id` (which has one) / no longer does.
  void HoldSlide(BlockId id);
  void DropSlide(BlockId id);
  int slide_holds(BlockId id) const { return slide_of_.empty() ? 0 : slide_holds_[id]; }
  // Slides Allocate took back from blocks that kept them unheld, so far.
  uint64_t slides_taken_back() const { return taken_back_; }

 private:
  std::optional<int32_t> TakeSlide();

  std::vector<int> refs_;
  std::vector<BlockId> free_;  // LIFO: recently freed blocks are reused first
  // Slides: per block its slide and the holds on it; the free slides; the
  // blocks whose slide lost its last hold, oldest first (entries whose
  // block was held again or freed since are skipped).
  int num_slides_ = 0;
  std::vector<int32_t> slide_of_;
  std::vector<int> slide_holds_;
  std::vector<int32_t> free_slides_;
  std::deque<BlockId> let_go_;
  uint64_t taken_back_ = 0;
};

}  // namespace braid::kv
