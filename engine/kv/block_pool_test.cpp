#include "kv/block_pool.h"

#include <doctest/doctest.h>

namespace braid::kv {
namespace {

TEST_CASE("a fresh pool hands out every block once, then nothing") {
  BlockPool pool(3);
  CHECK(pool.num_blocks() == 3);
  CHECK(pool.num_free() == 3);
  CHECK(pool.Allocate() == BlockId{0});
  CHECK(pool.Allocate() == BlockId{1});
  CHECK(pool.Allocate() == BlockId{2});
  CHECK(pool.num_free() == 0);
  CHECK_FALSE(pool.Allocate().has_value());
  for (BlockId b = 0; b < 3; ++b) CHECK(pool.refcount(b) == 1);
}

TEST_CASE("a block is free again only when its last reference goes") {
  BlockPool pool(2);
  BlockId a = *pool.Allocate();
  pool.AddRef(a);
  pool.AddRef(a);
  CHECK(pool.refcount(a) == 3);
  pool.Release(a);
  pool.Release(a);
  CHECK(pool.refcount(a) == 1);
  CHECK(pool.num_free() == 1);
  pool.Release(a);
  CHECK(pool.refcount(a) == 0);
  CHECK(pool.num_free() == 2);
}

TEST_CASE("the free list is LIFO: the most recently freed block is reused first") {
  BlockPool pool(4);
  BlockId a = *pool.Allocate();
  BlockId b = *pool.Allocate();
  BlockId c = *pool.Allocate();
  pool.Release(b);
  pool.Release(a);
  pool.Release(c);
  CHECK(pool.Allocate() == c);
  CHECK(pool.Allocate() == a);
  CHECK(pool.Allocate() == b);
  CHECK(pool.Allocate() == BlockId{3});
  CHECK_FALSE(pool.Allocate().has_value());
}

TEST_CASE("an empty pool allocates nothing") {
  BlockPool pool(0);
  CHECK(pool.num_free() == 0);
  CHECK_FALSE(pool.Allocate().has_value());
}

TEST_CASE("with slides, every allocated block comes with a held slide") {
  BlockPool pool(4, 2);
  CHECK(pool.num_slides() == 2);
  BlockId a = *pool.Allocate(), b = *pool.Allocate();
  CHECK(pool.slide(a) != kNoSlide);
  CHECK(pool.slide(b) != kNoSlide);
  CHECK(pool.slide(a) != pool.slide(b));
  CHECK(pool.slide_holds(a) == 1);
  // Both slides held: no third block, though blocks are free.
  CHECK(pool.num_free() == 2);
  CHECK_FALSE(pool.Allocate().has_value());
  CHECK(pool.num_free() == 2);
}

TEST_CASE("a slide let go stays with its block until a new block needs it, oldest first") {
  BlockPool pool(4, 2);
  BlockId a = *pool.Allocate(), b = *pool.Allocate();
  const int32_t sa = pool.slide(a);
  pool.DropSlide(b);
  pool.DropSlide(a);
  CHECK(pool.slide(a) == sa);  // still there: a cache hit may read it
  BlockId c = *pool.Allocate();
  CHECK(pool.slide(b) == kNoSlide);  // b's went first
  CHECK(pool.slide(a) == sa);
  CHECK(pool.refcount(b) == 1);  // the block itself stays
  // Held again, a's slide is not taken.
  pool.HoldSlide(a);
  CHECK_FALSE(pool.Allocate().has_value());
  pool.DropSlide(a);
  BlockId d = *pool.Allocate();
  CHECK(pool.slide(a) == kNoSlide);
  CHECK(pool.slide(d) == sa);
  CHECK(pool.slide(c) != kNoSlide);
}

TEST_CASE("a freed block gives its slide back") {
  BlockPool pool(3, 1);
  BlockId a = *pool.Allocate();
  pool.DropSlide(a);
  pool.Release(a);
  CHECK(pool.num_free() == 3);
  CHECK(pool.num_free_slides() == 1);
  BlockId b = *pool.Allocate();
  CHECK(pool.slide(b) != kNoSlide);
  // a's stale entry among the let-go slides is skipped.
  pool.DropSlide(b);
  BlockId c = *pool.Allocate();
  CHECK(pool.slide(b) == kNoSlide);
  CHECK(pool.slide(c) != kNoSlide);
}

TEST_CASE("a slide held and let go many times is still taken back once, in order") {
  BlockPool pool(3, 2);
  BlockId a = *pool.Allocate(), b = *pool.Allocate();
  pool.DropSlide(b);
  for (int i = 0; i < 1000; ++i) {  // the queue of let-go slides is compacted on the way
    pool.HoldSlide(a);
    pool.DropSlide(a);
  }
  pool.DropSlide(a);
  pool.HoldSlide(a);
  BlockId c = *pool.Allocate();  // b's, let go first
  CHECK(pool.slide(b) == kNoSlide);
  CHECK(pool.slide(a) != kNoSlide);
  CHECK(pool.slide(c) != kNoSlide);
  CHECK_FALSE(pool.Allocate().has_value());  // a's is held
}

TEST_CASE("without slides, the slide calls change nothing") {
  BlockPool pool(2);
  BlockId a = *pool.Allocate();
  CHECK(pool.slide(a) == kNoSlide);
  pool.HoldSlide(a);
  pool.DropSlide(a);
  CHECK(pool.slide_holds(a) == 0);
  CHECK(pool.Allocate().has_value());
}

}  // namespace
}  // namespace braid::kv
