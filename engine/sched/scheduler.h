// The step scheduler: decides, once per iteration, which sequences run how
// many tokens, under a token budget (Sarathi-style stall-free batching):
//   1. running decodes (one token each),
//   2. unfinished prefill chunks of running sequences,
//   3. new requests from the waiting queue, in policy order, with their
//      cached prefix taken from the radix cache (chunked prefill).
// When the KV pool runs out, the running sequence that comes last in policy
// order is preempted by recompute: it loses its blocks and goes back to
// waiting with its generated tokens kept. The policy hears every sequence
// that starts waiting and the service each planned item gives.
//
// Plain data out (StepPlan), no model calls: the engine runs the plan, then
// calls Commit. Not thread-safe: the step loop owns it.
#pragma once

#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_tier.h"
#include "kv/radix_cache.h"
#include "sched/latency_budget.h"
#include "sched/policy.h"
#include "sched/sequence.h"
#include "sched/step_budget.h"

namespace braid {

struct SchedulerConfig {
  int max_running = 64;        // sequences in the running set
  int max_batch_tokens = 256;  // tokens per step
  // While latency-class work is present, throughput-class tokens join a step
  // only while the step holds at most this many tokens (latency work itself
  // is not capped). 0: the cap comes from the LatencyBudget given with
  // set_latency_budget (the largest step whose measured time stays within
  // its ratio of the latency work alone), or is the latency tokens alone.
  int latency_batch_tokens = 0;
  // KV kept for the growth of what runs: a waiting sequence is admitted only
  // while the free and evictable blocks also cover, for every running
  // sequence and itself, the prompt still to compute and `ratio` of the
  // output still allowed (max_tokens - generated). The ratio starts at
  // growth_reserve, falls by growth_reserve_decay a step down to
  // growth_reserve_min (outputs often end early), and goes back to
  // growth_reserve at each preemption. With nothing running a sequence is
  // always admitted. 0: no reserve (admission needs only this step's blocks).
  double growth_reserve = 0.5;
  double growth_reserve_min = 0.05;
  double growth_reserve_decay = 0.002;
  // Anti-thrashing admission: a waiting sequence is admitted only while the
  // blocks it may take leave every running sequence room for all of its
  // allowed output (the reserve at ratio 1, not decayed), so no turn is
  // preempted, its context evicted, before it finishes; and a sequence that
  // does not continue an expected context (RadixCache::Expect: an agent's
  // context kept through a tool call) may not count the blocks of expected
  // contexts as evictable, so new work does not evict the contexts of
  // programs about to come back. With nothing running a sequence is always
  // admitted.
  bool anti_thrash = false;
  // Positions a query attends back to (its own included) in every layer:
  // a model whose layers all slide (ModelConfig::AttentionWindow). Once a
  // sequence's prompt is computed and offered to the cache, the blocks
  // that fall out of its window are let go: the cache keeps what it was
  // offered (evictable), the rest goes back to the pool, and the sequence
  // offers nothing more. 0: no limit.
  int window = 0;
  // A hybrid model's sliding layers' window, when the pool keeps their
  // share of each block apart (kv::BlockPool slides): a sequence holds the
  // slides of the blocks its next queries read in those layers and lets go
  // of the others (which stay, unheld, until the pool needs them); a cached
  // prefix is reused only as far as the slides of its last window are
  // still there. 0: no slides.
  int slide_window = 0;
};

struct ScheduledItem {
  SeqState* seq = nullptr;
  int start = 0;  // first position computed this step (= seq->num_computed)
  int n_tokens = 0;
  bool sample = false;  // the step reaches the end of the sequence: sample a token
  int charged = 0;      // prompt positions this item charged to the policy
  int cached = 0;       // prompt positions found in the cache it charged (at w_c)
  // Of n_tokens, how many are guesses after the sequence's last token
  // (speculative decoding): they are computed but not yet part of the
  // sequence, and count as computed only once Confirm says they held.
  int guesses = 0;
};

// Blocks of a sequence's prefix that come back from the lower KV tier: its
// blocks [first_block, first_block + slots.size()) are to be copied in from
// those tier slots (pinned) before the step's forward pass.
struct TierLoad {
  SeqState* seq = nullptr;
  int first_block = 0;
  std::vector<kv::SlotId> slots;
};

struct StepPlan {
  std::vector<ScheduledItem> items;
  std::vector<TierLoad> loads;
  std::vector<SeqState*> preempted;  // sent back to waiting during this Schedule
  int n_tokens = 0;
  bool empty() const { return items.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, kv::BlockPool& pool, kv::RadixCache& cache,
            AdmissionPolicy& policy);

  const SchedulerConfig& config() const { return config_; }
  // Blocks a sequence of `tokens` tokens needs.
  int BlocksFor(int tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  // The most blocks a sequence with a `prompt`-token prompt holds at once
  // by the time it reaches `tokens` positions (SchedulerConfig::window).
  int PeakBlocks(int prompt, int tokens) const;

  // The lower KV tier admissions look in after the device cache (not owned;
  // null: none). A sequence's prefix found there counts as computed once
  // the plan's loads are copied in.
  void set_tier(kv::KvTier* tier) { tier_ = tier; }
  // A load of the plan failed: the sequence goes back to waiting (as a
  // preemption) and computes those positions when admitted again.
  void Unload(SeqState* s, StepPlan* plan) {
    s->num_computed = s->inserted_blocks * block_size_;  // what the device cache lent it
    Preempt(s, plan);
  }

  // The learned step cap used when config().latency_batch_tokens is 0 (not owned).
  void set_latency_budget(const LatencyBudget* budget) { latency_budget_ = budget; }
  // A step-time target (EngineOptions::step_ms; not owned, null: none):
  // prompt chunks join a step while it holds at most budget->Cap() tokens,
  // one granule of them at least; decodes are never held back.
  void set_step_budget(const StepBudget* budget) { step_budget_ = budget; }

  // Queues a new sequence (status waiting, no blocks).
  void Add(SeqState* s);
  // Plans one step. Sequences in the plan have blocks for every position
  // they compute.
  StepPlan Schedule();
  // Lets a planned decode also check up to `guesses` guessed tokens after
  // it, as far as free blocks allow (no eviction, no preemption: guesses
  // never displace confirmed work). Returns how many it may check.
  int AddGuesses(ScheduledItem* item, int guesses, StepPlan* plan);
  // Records that the plan ran: advances num_computed past each item's
  // confirmed tokens and offers the blocks of completed prompts to the
  // prefix cache.
  void Commit(const StepPlan& plan);
  // After Commit: the first `accepted` guesses of s's item held (the
  // sequence's tokens now include them), so their KV counts as computed.
  // The rest of its positions are overwritten when the sequence gets there.
  void Confirm(SeqState* s, int accepted) { s->num_computed += accepted; }
  // Takes a sequence out (finished or cancelled) and releases its blocks;
  // with `insert`, its computed full blocks are offered to the cache first.
  void Remove(SeqState* s, bool insert);

  // Per client: service planned so far (prompt tokens computed, tokens
  // generated), and its waiting and running sequences now. Past
  // kMaxIdleClients clients, one whose last sequence leaves is dropped.
  struct ClientService {
    uint64_t prompt_tokens = 0, generated_tokens = 0;
    int waiting = 0, running = 0;
  };
  std::map<std::string, ClientService> ClientServices() const;
  static constexpr size_t kMaxIdleClients = 4096;

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }

 private:
  bool EnsureBlocks(SeqState* s, int tokens, StepPlan* plan, bool may_preempt);
  // Appends block b to s's table (and, with slides, its slide).
  void Append(SeqState* s, kv::BlockId b);
  bool AllocateBlock(kv::BlockId* id);
  void Preempt(SeqState* victim, StepPlan* plan);
  // Blocks `s` may still take: its prompt still to compute and growth_ratio_
  // of its output still allowed, beyond the blocks it holds.
  int FutureBlocks(const SeqState& s) const;
  // Blocks eviction could give back to the pool now.
  int Evictable() const;
  // Of those, the blocks of contexts someone expects to read again.
  int ExpectedBlocks() const;
  void ReleaseBlocks(SeqState* s);
  // Admits `s` with a chunk of at most `budget` tokens when its blocks and
  // `reserve` more (FutureBlocks of the running set) are free or evictable.
  bool Admit(SeqState* s, int budget, int reserve, StepPlan* plan);
  void OfferToCache(SeqState* s);
  // Lets go of the blocks no later query of `s` reads (SchedulerConfig::window),
  // and of the slides (SchedulerConfig::slide_window).
  void DropOutOfWindow(SeqState* s);
  // With slides: the first of `blocks` whose slide a query at `pos` reads.
  int FirstSlide(int pos) const;
  // Whether every block a query at blocks.size() * block_size reads in the
  // sliding layers still has its slide.
  bool SlidesCover(std::span<const kv::BlockId> blocks) const;
  // Adds an item to the plan and tells the policy the service it gives.
  void Plan(const ScheduledItem& item, StepPlan* plan);

  SchedulerConfig config_;
  const LatencyBudget* latency_budget_ = nullptr;
  const StepBudget* step_budget_ = nullptr;
  kv::BlockPool& pool_;
  kv::RadixCache& cache_;
  AdmissionPolicy& policy_;
  kv::KvTier* tier_ = nullptr;
  int block_size_;
  double growth_ratio_;  // SchedulerConfig::growth_reserve, decayed
  std::vector<SeqState*> waiting_;
  std::vector<SeqState*> running_;
  struct Ledger {
    uint64_t prompt_tokens = 0, generated_tokens = 0;
    int live = 0;  // sequences added and not yet removed
  };
  std::unordered_map<std::string, Ledger> ledgers_;
};

}  // namespace braid
