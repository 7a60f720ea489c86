// The KV pool sized from memory (EngineOptions::kv_tokens 0): the block
// count from the available memory, the engine's pool and its figure in
// stats, and the zeroed lazily-touched buffer the pool lives in.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "engine/system_probe.h"
#include "kernels/huge_pages.h"

namespace braid {
namespace {

const std::string kTiny = std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/models/llama_tiny";

TEST_CASE("KvBlocksForMemory: a fraction of the memory, within the bounds") {
  const uint64_t gb = uint64_t{1} << 30;
  CHECK(KvBlocksForMemory(10 * gb, 0.3, 1 << 20, 1, 1 << 20) == 3072);     // 3 GiB of 1 MiB blocks
  CHECK(KvBlocksForMemory(10 * gb, 0.3, 1 << 20, 4000, 1 << 20) == 4000);  // at least one context
  CHECK(KvBlocksForMemory(10 * gb, 0.3, 1 << 20, 1, 1000) == 1000);        // at most the cap
  CHECK(KvBlocksForMemory(0, 0.3, 1 << 20, 8, 1000) == 8);                 // memory unknown
  CHECK(KvBlocksForMemory(1000 * gb, 0.9, 1, 1, 1 << 30) == 1 << 30);      // no int overflow
}

TEST_CASE("an engine with kv_tokens 0 sizes its pool from the available memory") {
  EngineOptions o;
  o.model.path = kTiny;
  o.model.require_tokenizer = false;  // the fixture has none: ids only
  o.model.threads = 1;
  o.model.context = 64;
  o.kv_tokens = 0;
  o.kv_memory_fraction = 0.001;
  const uint64_t before = AvailableMemoryBytes();
  REQUIRE(before > 0);
  auto e = Engine::Open(o);
  REQUIRE_MESSAGE(e.ok(), e.status().ToString());
  const EngineStats s = (*e)->stats();
  CHECK(s.kv_blocks_total >= 64 / o.block_size);  // at least one context
  CHECK(s.kv_blocks_free == s.kv_blocks_total);
  CHECK(s.kv_pool_bytes > 0);
  // 0.1% of what was available, within one block (and the memory moving a little meanwhile).
  const double want = 0.001 * static_cast<double>(before);
  const double per_block = static_cast<double>(s.kv_pool_bytes) / s.kv_blocks_total;
  CHECK(static_cast<double>(s.kv_pool_bytes) <= 1.1 * want + per_block);
  CHECK(static_cast<double>(s.kv_pool_bytes) >= 0.9 * want - per_block);

  o.kv_memory_fraction = 0.96;
  auto bad = Engine::Open(o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("kv_memory_fraction") != std::string::npos);
}

TEST_CASE("ZeroedBuffer: zeroed, 2 MiB aligned, writable to the end") {
  for (size_t n : {size_t{1}, size_t{4096}, size_t{3} << 20}) {
    kernels::ZeroedBuffer<uint8_t> b(n);
    REQUIRE(b.data() != nullptr);
    CHECK(b.size() == n);
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % (size_t{2} << 20) == 0);
    bool zero = true;
    for (size_t i = 0; i < n; i += 997) zero = zero && b[i] == 0;
    CHECK(zero);
    b[n - 1] = 7;
    CHECK(b.data()[n - 1] == 7);
  }
  kernels::ZeroedBuffer<float> none(0);
  CHECK(none.data() == nullptr);
}

}  // namespace
}  // namespace braid
