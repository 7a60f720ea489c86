// TierIo between a pool, its radix cache, a scheduler and a KvMemory whose
// blocks are plain bytes: evicted blocks reach the tier and come back
// byte for byte; a failed copy back sends its sequence to compute instead.
#include "runner/tier_io.h"

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "sched/policy.h"

namespace braid {
namespace {

constexpr int kBs = 16;
constexpr size_t kBlockBytes = 64;

// KV memory of n blocks of kBlockBytes bytes each, copied at once; CopyIn
// fails while `fail_in` is set.
class BytesKv final : public KvMemory {
 public:
  explicit BytesKv(int n) : data(static_cast<size_t>(n) * kBlockBytes), n_(n) {}
  int n_blocks() const override { return n_; }
  int block_size() const override { return kBs; }
  size_t bytes() const override { return data.size(); }
  size_t block_bytes() const override { return kBlockBytes; }
  Result<uint64_t> CopyOut(std::span<const int32_t> blocks,
                           std::span<uint8_t* const> dst) override {
    for (size_t i = 0; i < blocks.size(); ++i) std::memcpy(dst[i], Block(blocks[i]), kBlockBytes);
    return ++fence_;
  }
  Result<uint64_t> CopyIn(std::span<const uint8_t* const> src,
                          std::span<const int32_t> blocks) override {
    if (fail_in) return Status::Internal("copy refused by the test");
    for (size_t i = 0; i < blocks.size(); ++i) std::memcpy(Block(blocks[i]), src[i], kBlockBytes);
    return ++fence_;
  }
  double TakeCopySeconds(uint64_t) override { return 0; }
  uint8_t* Block(int32_t b) { return data.data() + static_cast<size_t>(b) * kBlockBytes; }

  std::vector<uint8_t> data;
  bool fail_in = false;

 private:
  int n_;
  uint64_t fence_ = 0;
};

struct Rig {
  BytesKv kv{8};
  kv::BlockPool pool{8};
  kv::RadixCache cache{pool, kBs};
  std::unique_ptr<AdmissionPolicy> policy = MakePolicy("fcfs", {});
  Scheduler sched;
  std::unique_ptr<TierIo> io;

  static SchedulerConfig Config() {
    SchedulerConfig c;
    c.max_batch_tokens = 256;
    c.growth_reserve = 0;
    return c;
  }
  Rig() : sched(Config(), pool, cache, *policy) {
    auto opened = TierIo::Open(kv, 16 * kBlockBytes, kBs, pool, cache);
    REQUIRE(opened.ok());
    io = std::move(*opened);
    sched.set_tier(&io->tier());
    cache.set_evict_sink(
        [t = io.get()](uint64_t salt, uint64_t parent, std::span<const int32_t> tokens,
                       kv::BlockId block) { t->OnEvict(salt, parent, tokens, block); });
  }

  // A 64-token prompt's 4 blocks cached, each filled with its index + 1.
  std::vector<int32_t> CachePrompt() {
    std::vector<int32_t> tokens(64);
    for (int i = 0; i < 64; ++i) tokens[static_cast<size_t>(i)] = 1000 + i;
    std::vector<kv::BlockId> blocks;
    for (int i = 0; i < 4; ++i) {
      blocks.push_back(*pool.Allocate());
      std::memset(kv.Block(blocks.back()), i + 1, kBlockBytes);
    }
    cache.Insert(0, tokens, blocks);
    for (kv::BlockId b : blocks) pool.Release(b);
    return tokens;
  }

  // Evicts everything (copies out at the next Flush) and scribbles over the pool.
  void EvictAll() {
    cache.Evict(8);
    StepPlan empty;
    io->Flush(empty, sched);
    std::memset(kv.data.data(), 0xee, kv.data.size());
  }
};

SeqState Seq(const std::vector<int32_t>& prompt) {
  SeqState s;
  s.id = 1;
  s.tokens = prompt;
  s.tokens.push_back(7);  // one more token to compute
  s.prompt_len = static_cast<int>(s.tokens.size());
  s.max_tokens = 1;
  return s;
}

TEST_CASE("evicted blocks come back from the host tier byte for byte") {
  Rig rig;
  const std::vector<int32_t> prompt = rig.CachePrompt();
  rig.EvictAll();
  EngineStats st;
  rig.io->AddStats(&st);
  CHECK(st.host_blocks_out == 4);
  CHECK(st.kv_host_blocks_used == 4);

  SeqState s = Seq(prompt);
  rig.sched.Add(&s);
  StepPlan plan = rig.sched.Schedule();
  REQUIRE(plan.loads.size() == 1);
  CHECK(s.num_computed == 64);
  rig.io->Flush(plan, rig.sched);
  CHECK(plan.loads.empty());
  REQUIRE(plan.items.size() == 1);
  for (int i = 0; i < 4; ++i) {
    const uint8_t* b = rig.kv.Block(s.blocks[static_cast<size_t>(i)]);
    CHECK(b[0] == i + 1);
    CHECK(b[kBlockBytes - 1] == i + 1);
  }
  rig.io->AddStats(&st);
  CHECK(st.host_blocks_in == 4);
  CHECK(st.host_bytes_in == 4 * kBlockBytes);
  CHECK(st.host_copy_failures == 0);
  CHECK(rig.io->tier().CheckInvariants().ok());
}

TEST_CASE("a failed copy back drops the tier's entries and computes the prompt") {
  Rig rig;
  const std::vector<int32_t> prompt = rig.CachePrompt();
  rig.EvictAll();
  SeqState s = Seq(prompt);
  rig.sched.Add(&s);
  StepPlan plan = rig.sched.Schedule();
  REQUIRE(plan.loads.size() == 1);
  rig.kv.fail_in = true;
  rig.io->Flush(plan, rig.sched);
  CHECK(plan.items.empty());  // sent back to waiting
  CHECK(s.status == SeqStatus::kWaiting);
  EngineStats st;
  rig.io->AddStats(&st);
  CHECK(st.host_copy_failures == 1);
  CHECK(st.kv_host_blocks_used == 0);  // nothing stale is kept
  CHECK(rig.io->tier().CheckInvariants().ok());
  // Admitted again, it computes everything: no load, nothing cached.
  rig.kv.fail_in = false;
  StepPlan again = rig.sched.Schedule();
  CHECK(again.loads.empty());
  REQUIRE(again.items.size() == 1);
  CHECK(again.items[0].start == 0);
  CHECK(rig.cache.CheckInvariants().ok());
}

TEST_CASE("a prefetch joins the cache before planning, into free blocks only") {
  Rig rig;
  const std::vector<int32_t> prompt = rig.CachePrompt();
  rig.EvictAll();
  CHECK(rig.io->Prefetch(0, prompt) == 4);
  CHECK(rig.cache.Probe(0, prompt) == 0);  // not until its copy is asked for
  rig.io->AskPrefetches();
  CHECK(rig.cache.Probe(0, prompt) == 64);
  const kv::PrefixMatch m = rig.cache.Lookup(0, prompt);
  for (int i = 0; i < 4; ++i) CHECK(rig.kv.Block(m.blocks[static_cast<size_t>(i)])[0] == i + 1);
  // The tier's copies stay: evicting again asks for no copy out.
  rig.cache.Evict(8);
  StepPlan empty;
  rig.io->Flush(empty, rig.sched);
  EngineStats st;
  rig.io->AddStats(&st);
  CHECK(st.host_blocks_out == 4);
  CHECK(st.host_blocks_in == 4);
  CHECK(st.host_in_hidden_seconds == 0);  // this KvMemory times nothing
  CHECK(rig.pool.num_free() == 8);
}

}  // namespace
}  // namespace braid
