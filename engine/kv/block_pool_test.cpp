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

}  // namespace
}  // namespace braid::kv
