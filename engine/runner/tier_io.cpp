#include "runner/tier_io.h"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace braid {

Result<std::unique_ptr<TierIo>> TierIo::Open(KvMemory& kv, uint64_t bytes, int block_size,
                                             kv::BlockPool& pool, kv::RadixCache& cache,
                                             bool prefetch) {
  const size_t block_bytes = kv.block_bytes();
  const uint64_t slots = bytes / block_bytes;
  if (slots < 1)
    return Status::InvalidArgument("the host KV tier of " + std::to_string(bytes) +
                                   " bytes holds no block of " + std::to_string(block_bytes) +
                                   " bytes");
  if (slots > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    return Status::InvalidArgument("the host KV tier holds too many blocks");
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<kv::KvTier> tier,
                         kv::KvTier::Create(static_cast<int>(slots), block_bytes, block_size));
  std::unique_ptr<TierIo> io(new TierIo(kv, std::move(tier), pool, cache));
  io->prefetch_ = prefetch;
  BRAID_RETURN_IF_ERROR(kv.RegisterHost(io->tier_->memory(), io->tier_->bytes()));
  io->registered_ = true;
  return io;
}

TierIo::~TierIo() {
  for (Prefetched& p : prefetched_) {
    for (size_t i = p.first; i < p.blocks.size(); ++i) pool_->Release(p.blocks[i]);
    cache_->Unlock(p.lock);
  }
  if (!registered_) return;
  // Copies still running read or write the tier's memory.
  for (const auto& [fence, copy] : copies_)
    while (!kv_.CopiesDone(fence)) {
    }
  kv_.UnregisterHost(tier_->memory());
}

void TierIo::OnEvict(uint64_t salt, uint64_t parent, std::span<const int32_t> tokens,
                     kv::BlockId block) {
  const kv::SlotId slot = tier_->Store(salt, parent, tokens);
  if (slot < 0) return;  // held already, or no room
  out_blocks_.push_back(block);
  out_slots_.push_back(slot);
}

int TierIo::Prefetch(uint64_t salt, std::span<const int32_t> tokens) {
  kv::BlockPool& pool = *pool_;
  kv::RadixCache& cache = *cache_;
  // Free blocks only: nothing is evicted for a read that has not come yet.
  // Blocks freed by evictions whose copy out is not yet asked for are not
  // taken either (the copy in would have to wait for it).
  if (!prefetch_ || !out_blocks_.empty()) return 0;
  const int bs = tier_->block_size();
  Prefetched p;
  p.salt = salt;
  const kv::PrefixMatch m = cache.MatchAndLock(salt, tokens, &p.lock);
  const int room = std::min(
      pool.num_free(), static_cast<int>(tokens.size()) / bs - static_cast<int>(m.blocks.size()));
  if (room > 0)
    p.slots = tier_->Match(salt, m.chain,
                           tokens.subspan(static_cast<size_t>(m.tokens),
                                          static_cast<size_t>(room) * static_cast<size_t>(bs)));
  if (p.slots.empty()) {
    cache.Unlock(p.lock);
    return 0;
  }
  // The device's match stays locked, and the new blocks held, until the
  // copy is asked for and they join the cache (Flush).
  p.blocks = m.blocks;
  for (size_t i = 0; i < p.slots.size(); ++i) p.blocks.push_back(*pool.Allocate());
  p.tokens.assign(tokens.begin(), tokens.begin() + static_cast<long>(p.blocks.size()) * bs);
  p.first = m.blocks.size();
  prefetched_.push_back(std::move(p));
  return static_cast<int>(prefetched_.back().slots.size());
}

uint64_t TierIo::CopyOut(std::span<const kv::BlockId> blocks, std::span<const kv::SlotId> slots) {
  std::vector<uint8_t*> dst;
  for (kv::SlotId s : slots) dst.push_back(tier_->data(s));
  Result<uint64_t> fence = kv_.CopyOut(blocks, dst);
  if (!fence.ok()) {
    std::fprintf(stderr, "braid: copying %zu KV blocks to host memory failed: %s\n", blocks.size(),
                 fence.status().ToString().c_str());
    for (kv::SlotId s : slots) tier_->Drop(s);
    ++failures_;
    return 0;
  }
  copies_[*fence] = {Kind::kOut};
  blocks_out_ += blocks.size();
  return *fence;
}

uint64_t TierIo::CopyIn(std::span<const kv::SlotId> slots, std::span<const kv::BlockId> blocks,
                        Kind kind) {
  std::vector<const uint8_t*> src;
  for (kv::SlotId s : slots) src.push_back(tier_->data(s));
  Result<uint64_t> fence = kv_.CopyIn(src, blocks);
  if (!fence.ok()) {
    std::fprintf(stderr, "braid: copying %zu KV blocks back from host memory failed: %s\n",
                 blocks.size(), fence.status().ToString().c_str());
    for (kv::SlotId s : slots) tier_->Drop(s);
    ++failures_;
    return 0;
  }
  for (kv::SlotId s : slots) tier_->Unpin(s);
  copies_[*fence] = {kind};
  blocks_in_ += blocks.size();
  return *fence;
}

void TierIo::AskPrefetches() {
  for (Prefetched& p : prefetched_) {
    const auto fresh = std::span<const kv::BlockId>(p.blocks).subspan(p.first);
    const uint64_t fence = CopyIn(p.slots, fresh, Kind::kPrefetch);
    if (fence != 0) {
      cache_->Insert(p.salt, p.tokens, p.blocks);
      for (kv::BlockId b : fresh) landing_[b] = fence;
    }
    for (kv::BlockId b : fresh) pool_->Release(b);
    cache_->Unlock(p.lock);
  }
  prefetched_.clear();
}

void TierIo::Flush(StepPlan& plan, Scheduler& scheduler) {
  Collect();
  // 1. Prefetches since the plan: before any copy out, which may read
  // their blocks.
  AskPrefetches();
  uint64_t wait = 0;
  // 2. Evicted blocks out, before any pass may reuse them.
  if (!out_blocks_.empty()) {
    wait = std::max(wait, CopyOut(out_blocks_, out_slots_));
    out_blocks_.clear();
    out_slots_.clear();
  }
  // 3. The plan's loads in.
  std::vector<SeqState*> failed;
  for (const TierLoad& load : plan.loads) {
    const auto blocks = std::span<const kv::BlockId>(load.seq->blocks)
                            .subspan(static_cast<size_t>(load.first_block), load.slots.size());
    const uint64_t fence = CopyIn(load.slots, blocks, Kind::kIn);
    if (fence == 0) failed.push_back(load.seq);
    wait = std::max(wait, fence);
  }
  plan.loads.clear();
  for (SeqState* s : failed) scheduler.Unload(s, &plan);
  // Prefetched blocks the pass reads (or reuses) whose copy may still run.
  if (!landing_.empty()) {
    for (const ScheduledItem& it : plan.items)
      for (kv::BlockId b : it.seq->blocks) {
        auto l = landing_.find(b);
        if (l == landing_.end()) continue;
        if (!kv_.CopiesDone(l->second)) {
          wait = std::max(wait, l->second);
          if (auto c = copies_.find(l->second); c != copies_.end()) c->second.waited = true;
        }
      }
  }
  if (wait > 0) {
    const Status s = kv_.WaitCopies(wait);
    if (!s.ok()) std::fprintf(stderr, "braid: waiting for KV copies: %s\n", s.ToString().c_str());
  }
}

void TierIo::Collect() {
  for (auto it = copies_.begin(); it != copies_.end();) {
    const double secs = kv_.TakeCopySeconds(it->first);
    if (secs < 0) break;  // copies finish in order
    const Copy& c = it->second;
    if (c.kind == Kind::kOut)
      out_seconds_ += secs;
    else if (c.kind == Kind::kIn || c.waited)
      in_exposed_ += secs;
    else
      in_hidden_ += secs;
    it = copies_.erase(it);
  }
  std::erase_if(landing_, [&](const auto& e) { return kv_.CopiesDone(e.second); });
}

void TierIo::AddStats(EngineStats* s) {
  Collect();
  const kv::TierStats t = tier_->stats();
  const uint64_t block_bytes = tier_->block_bytes();
  s->kv_host_blocks_total = t.slots;
  s->kv_host_blocks_used = t.used;
  s->kv_host_bytes = tier_->bytes();
  s->host_blocks_in = blocks_in_;
  s->host_blocks_out = blocks_out_;
  s->host_bytes_in = blocks_in_ * block_bytes;
  s->host_bytes_out = blocks_out_ * block_bytes;
  s->host_copy_failures = failures_;
  s->host_in_exposed_seconds = in_exposed_;
  s->host_in_hidden_seconds = in_hidden_;
  s->host_out_seconds = out_seconds_;
}

}  // namespace braid
