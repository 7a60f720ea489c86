#include "sched/scheduler.h"

#include <algorithm>

namespace braid {

Scheduler::Scheduler(const SchedulerConfig& config, kv::BlockPool& pool, kv::RadixCache& cache,
                     AdmissionPolicy& policy)
    : config_(config),
      pool_(pool),
      cache_(cache),
      policy_(policy),
      block_size_(cache.block_size()),
      growth_ratio_(config.growth_reserve) {}

void Scheduler::Add(SeqState* s) {
  s->status = SeqStatus::kWaiting;
  ledgers_[s->client].live++;
  policy_.OnWaiting(*s, waiting_);
  waiting_.push_back(s);
}

void Scheduler::Plan(const ScheduledItem& item, StepPlan* plan) {
  ScheduledItem it = item;
  SeqState* s = it.seq;
  const int end = std::min(it.start + it.n_tokens, s->prompt_len);
  it.charged = std::max(0, end - std::max(it.start, s->charged));
  s->charged += it.charged;
  policy_.OnService(*s, it.charged, it.cached, it.sample ? 1 : 0);
  Ledger& l = ledgers_[s->client];
  l.prompt_tokens += it.charged;
  l.generated_tokens += it.sample ? 1 : 0;
  plan->items.push_back(it);
  plan->n_tokens += it.n_tokens;
}

bool Scheduler::AllocateBlock(kv::BlockId* id) {
  if (pool_.num_free() == 0) cache_.Evict(1);
  std::optional<kv::BlockId> b = pool_.Allocate();
  // With slides, a free block may lack a slide to go with it: evicting a
  // cached block frees its slide too.
  while (!b && pool_.num_slides() > 0 && cache_.Evict(1) > 0) b = pool_.Allocate();
  if (!b) return false;
  *id = *b;
  return true;
}

void Scheduler::ReleaseBlocks(SeqState* s) {
  for (size_t i = 0; i < s->blocks.size(); ++i) {
    const kv::BlockId b = s->blocks[i];
    if (b == kv::kNoBlock) continue;
    if (static_cast<int>(i) >= s->slides_from) pool_.DropSlide(b);
    pool_.Release(b);
  }
  s->blocks.clear();
  s->slides.clear();
  s->dropped_blocks = 0;
  s->slides_from = 0;
  if (s->lock) cache_.Unlock(s->lock);
  s->lock = 0;
  s->num_computed = 0;
  s->inserted_blocks = 0;
  s->locked_blocks = 0;
}

void Scheduler::Preempt(SeqState* victim, StepPlan* plan) {
  // Drop the victim's share of this step, if it had one.
  auto& items = plan->items;
  for (auto it = items.begin(); it != items.end(); ++it) {
    if (it->seq == victim) {
      plan->n_tokens -= it->n_tokens;
      victim->charged -= it->charged + it->cached;
      policy_.OnService(*victim, -it->charged, -it->cached,
                        it->sample ? -1 : 0);  // not done after all
      Ledger& l = ledgers_[victim->client];
      l.prompt_tokens -= it->charged;
      l.generated_tokens -= it->sample ? 1 : 0;
      items.erase(it);
      break;
    }
  }
  // Offer what it computed before letting go: recompute may then hit the cache.
  OfferToCache(victim);
  ReleaseBlocks(victim);
  victim->preemptions++;
  growth_ratio_ = config_.growth_reserve;  // outputs outgrew the reserve: keep more
  victim->status = SeqStatus::kWaiting;
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  policy_.OnWaiting(*victim, waiting_);
  waiting_.push_back(victim);
  plan->preempted.push_back(victim);
}

// Gives `s` blocks for its first `tokens` positions. When the pool is dry,
// preempts running sequences that come after `s` in policy order (latest
// first; `s` must be running); returns false if that is not enough.
bool Scheduler::EnsureBlocks(SeqState* s, int tokens, StepPlan* plan, bool may_preempt) {
  const int need = BlocksFor(tokens);
  while (static_cast<int>(s->blocks.size()) < need) {
    kv::BlockId id;
    if (AllocateBlock(&id)) {
      Append(s, id);
      continue;
    }
    if (!may_preempt) return false;
    // running_ is in policy order as of the step's start (a policy whose
    // order moves with the service planned would otherwise preempt the
    // sequence it just planned, and back again next step): the victim is
    // the last one, if it comes after s.
    auto me = std::find(running_.begin(), running_.end(), s);
    if (me == running_.end() || me + 1 == running_.end()) return false;
    SeqState* victim = running_.back();
    Preempt(victim, plan);
  }
  return true;
}

int Scheduler::Evictable() const {
  // The tree counts as evictable the blocks running sequences gave it and
  // still hold themselves (not those they let go); evicting those frees
  // nothing.
  int held = 0;
  for (const SeqState* r : running_)
    held += std::max(0, r->inserted_blocks - std::max(r->locked_blocks, r->dropped_blocks));
  return std::max(0, cache_.stats().evictable_blocks - held);
}

int Scheduler::ExpectedBlocks() const {
  const kv::RadixStats st = cache_.stats();
  return st.evictable_blocks - st.unexpected_blocks;
}

int Scheduler::FutureBlocks(const SeqState& s) const {
  const int left = std::max(0, s.max_tokens - s.generated());
  const int tokens = static_cast<int>(s.tokens.size()) + static_cast<int>(growth_ratio_ * left);
  const int held = static_cast<int>(s.blocks.size()) - s.dropped_blocks;
  return std::max(0, PeakBlocks(s.prompt_len, tokens) - held);
}

int Scheduler::PeakBlocks(int prompt, int tokens) const {
  if (config_.window <= 0) return BlocksFor(tokens);
  // Past its prompt a sequence holds its window and a step's chunk, plus a
  // block each end may share with positions outside them.
  const int window = BlocksFor(config_.window + config_.max_batch_tokens) + 1;
  return std::min(BlocksFor(tokens), std::max(BlocksFor(prompt), window));
}

bool Scheduler::Admit(SeqState* s, int budget, int reserve, StepPlan* plan) {
  const int total = static_cast<int>(s->tokens.size());
  // Leave at least the last token to compute (its logits are needed), and
  // every position whose logits score a prompt token.
  int match_len = total - 1;
  if (s->logprobs_from > 0) match_len = std::min(match_len, s->logprobs_from - 1);
  kv::LockId lock = 0;
  kv::PrefixMatch match =
      cache_.MatchAndLock(s->salt, std::span<const int32_t>(s->tokens.data(), match_len), &lock);
  if (config_.slide_window > 0 && !SlidesCover(match.blocks)) {
    // Some slide of the match's last window was taken back: use the
    // longest prefix of it whose last window is whole.
    size_t k = match.blocks.size();
    while (k > 0 && !SlidesCover(std::span<const kv::BlockId>(match.blocks.data(), k))) --k;
    cache_.Unlock(lock);
    lock = 0;
    match = cache_.MatchAndLock(s->salt,
                                std::span<const int32_t>(s->tokens.data(), k * block_size_), &lock);
  }
  // The lower tier may hold the blocks that continue the device's match.
  std::vector<kv::SlotId> host;
  if (tier_ != nullptr && match_len > match.tokens)
    host = tier_->Match(
        s->salt, match.chain,
        std::span<const int32_t>(s->tokens).subspan(match.tokens, match_len - match.tokens));
  const int loaded = static_cast<int>(host.size()) * block_size_;
  auto refuse = [&] {
    if (lock) cache_.Unlock(lock);
    for (kv::SlotId slot : host) tier_->Unpin(slot);
    return false;
  };
  const int known = match.tokens + loaded;  // positions whose KV exists somewhere
  const int n = std::min(total - known, budget);
  // Enough free (or evictable) blocks for this chunk, and for what the
  // running sequences and this one will still take?
  const int need = BlocksFor(known + n) - static_cast<int>(match.blocks.size());
  const bool reserving = growth_ratio_ > 0 && !running_.empty();
  const int own =
      reserving ? std::max(0, PeakBlocks(s->prompt_len,
                                         total + static_cast<int>(growth_ratio_ * s->max_tokens)) -
                                  BlocksFor(known + n))
                : 0;
  const int want = need + (reserving ? reserve + own : 0);
  auto available = [&] {
    int a = pool_.num_free() + Evictable();
    if (config_.anti_thrash && !match.expected) a -= ExpectedBlocks();
    return a;
  };
  // Contexts held for programs in a tool call (RadixCache::Expect with a
  // hold) give way, furthest expected first, to the first waiting sequence
  // when nothing runs (else nothing ever would), and to a sequence whose
  // own program is back (a context in use now beats one expected later).
  if (available() < want && (running_.empty() || match.expected)) cache_.Unhold(want - available());
  if (reserving && available() < want) return refuse();
  if (pool_.num_free() < need) cache_.Evict(need - pool_.num_free());
  if (pool_.num_free() < need) return refuse();
  for (kv::BlockId b : match.blocks) {
    pool_.AddRef(b);
    Append(s, b);
  }
  if (config_.slide_window > 0) {
    // It holds the slides its first queries read.
    s->slides_from = FirstSlide(static_cast<int>(match.blocks.size()) * block_size_);
    for (size_t i = s->slides_from; i < match.blocks.size(); ++i) pool_.HoldSlide(match.blocks[i]);
  }
  s->lock = lock;
  s->num_computed = known;
  s->inserted_blocks = s->locked_blocks = static_cast<int>(match.blocks.size());
  if (!EnsureBlocks(s, known + n, plan, /*may_preempt=*/false)) {
    // Free blocks but no slides to go with them (kv::BlockPool): it waits.
    ReleaseBlocks(s);
    for (kv::SlotId slot : host) tier_->Unpin(slot);
    return false;
  }
  if (s->preemptions == 0) {
    s->cached_tokens = std::min(match.tokens, s->prompt_len);
    s->host_tokens = std::min(known, s->prompt_len) - s->cached_tokens;
  }
  // Positions found in the cache (either tier) and never charged are
  // charged now, at their own price; recomputing charged positions is never
  // charged.
  ScheduledItem item{s, s->num_computed, n, known + n == total};
  item.cached = std::max(0, std::min(known, s->prompt_len) - s->charged);
  s->charged += item.cached;
  if (!host.empty())
    plan->loads.push_back({s, static_cast<int>(match.blocks.size()), std::move(host)});
  s->status = SeqStatus::kRunning;
  running_.push_back(s);
  Plan(item, plan);
  return true;
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  auto order = [&](const SeqState* a, const SeqState* b) { return policy_.Before(*a, *b); };
  std::stable_sort(running_.begin(), running_.end(), order);

  // While latency-class work is present, throughput-class tokens may only be
  // added as long as the whole step stays within the latency cap, so a
  // latency token costs about one small step; latency work itself is not capped.
  bool latency = false;
  int latency_tokens = 0;  // this step's latency work, as far as running sequences tell
  for (const SeqState* s : running_) {
    if (s->goal != GoalClass::kLatency) continue;
    latency = true;
    latency_tokens += static_cast<int>(s->tokens.size()) - s->num_computed;
  }
  for (const SeqState* s : waiting_) latency |= s->goal == GoalClass::kLatency;
  latency_tokens = std::clamp(latency_tokens, 1, config_.max_batch_tokens);
  int cap = config_.latency_batch_tokens;
  if (cap <= 0)
    cap = latency_budget_ != nullptr ? latency_budget_->Cap(latency_tokens) : latency_tokens;
  int budget = config_.max_batch_tokens;
  // With a step-time target, prompt chunks fill the step up to its cap (a
  // granule of them at least); decodes always run.
  const int step_cap = step_budget_ ? step_budget_->Cap() : 0;
  int chunk_floor = step_budget_ ? step_budget_->granule() : 0;
  auto allowance = [&](const SeqState* s) {
    int n = budget;
    if (latency && s->goal != GoalClass::kLatency)
      n = std::max(0, std::min(n, cap - plan.n_tokens));
    const bool decode = static_cast<int>(s->tokens.size()) - s->num_computed == 1;
    if (step_budget_ && !decode) n = std::min(n, std::max(chunk_floor, step_cap - plan.n_tokens));
    return n;
  };

  // 1. Decodes, then 2. prefill chunks, each in policy order. Preemption may
  // shrink running_ while we walk it, so walk a snapshot.
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<SeqState*> snapshot = running_;
    for (SeqState* s : snapshot) {
      if (s->status != SeqStatus::kRunning || allowance(s) == 0) continue;
      const int remaining = static_cast<int>(s->tokens.size()) - s->num_computed;
      const bool decode = remaining == 1;
      if (decode != (pass == 0)) continue;
      const int n = std::min(remaining, allowance(s));
      if (!EnsureBlocks(s, s->num_computed + n, &plan, /*may_preempt=*/true)) {
        // Nothing later in policy order is left to preempt: step aside.
        if (s->num_computed > 0 || !s->blocks.empty()) Preempt(s, &plan);
        continue;
      }
      Plan({s, s->num_computed, n, s->num_computed + n == static_cast<int>(s->tokens.size())},
           &plan);
      budget -= n;
      if (!decode) chunk_floor = std::max(0, chunk_floor - n);
    }
  }

  // 3. Admission, the first waiting sequence in policy order each time (the
  // order moves as the policy hears the service given); stop at the first
  // that does not fit.
  // A policy that weighs locality sees each waiting sequence's cached prefix
  // (probed once a step: admissions lock, they do not insert).
  std::vector<int> cached;
  if (policy_.uses_cached())
    for (const SeqState* w : waiting_)
      cached.push_back(
          cache_.Probe(w->salt, std::span<const int32_t>(w->tokens.data(), w->tokens.size() - 1)));
  // What the running sequences will still take (SchedulerConfig::growth_reserve).
  growth_ratio_ =
      std::max(config_.growth_reserve_min, growth_ratio_ - config_.growth_reserve_decay);
  if (config_.growth_reserve <= 0) growth_ratio_ = 0;
  if (config_.anti_thrash) growth_ratio_ = 1;
  int reserve = 0;
  if (growth_ratio_ > 0)
    for (const SeqState* r : running_) reserve += FutureBlocks(*r);
  while (budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < config_.max_running) {
    SeqState* s = policy_.Pick(waiting_, cached);
    if (allowance(s) == 0 || !Admit(s, allowance(s), reserve, &plan)) break;
    if (growth_ratio_ > 0) reserve += FutureBlocks(*s);
    const size_t at =
        static_cast<size_t>(std::find(waiting_.begin(), waiting_.end(), s) - waiting_.begin());
    waiting_.erase(waiting_.begin() + static_cast<long>(at));
    if (!cached.empty()) cached.erase(cached.begin() + static_cast<long>(at));
    budget -= plan.items.back().n_tokens;
    chunk_floor = std::max(0, chunk_floor - plan.items.back().n_tokens);
  }
  return plan;
}

std::map<std::string, Scheduler::ClientService> Scheduler::ClientServices() const {
  std::map<std::string, ClientService> out;
  for (const auto& [client, l] : ledgers_) {
    ClientService& c = out[client];
    c.prompt_tokens = l.prompt_tokens;
    c.generated_tokens = l.generated_tokens;
  }
  for (const SeqState* s : waiting_) out[s->client].waiting++;
  for (const SeqState* s : running_) out[s->client].running++;
  return out;
}

// Offers the full blocks of the computed prefix that the cache has not seen.
// A sequence that let blocks go has a hole in its table where the cache's
// path may since have been evicted: it offers nothing more.
void Scheduler::OfferToCache(SeqState* s) {
  if (s->dropped_blocks > 0) return;
  const int full = s->num_computed / block_size_;
  if (full <= s->inserted_blocks) return;
  cache_.Insert(s->salt, std::span<const int32_t>(s->tokens.data(), full * block_size_),
                std::span<const kv::BlockId>(s->blocks.data(), full));
  s->inserted_blocks = full;
}

int Scheduler::AddGuesses(ScheduledItem* item, int guesses, StepPlan* plan) {
  SeqState* s = item->seq;
  const int end = item->start + item->n_tokens;
  const int room =
      static_cast<int>(s->blocks.size()) * block_size_ - end + pool_.num_free() * block_size_;
  int n = std::clamp(guesses, 0, room);
  while (static_cast<int>(s->blocks.size()) < BlocksFor(end + n)) {
    std::optional<kv::BlockId> b = pool_.Allocate();
    if (!b) {  // no slide for it: as many guesses as the blocks held allow
      n = std::max(0, static_cast<int>(s->blocks.size()) * block_size_ - end);
      break;
    }
    Append(s, *b);
  }
  item->n_tokens += n;
  item->guesses += n;
  plan->n_tokens += n;
  return n;
}

void Scheduler::Commit(const StepPlan& plan) {
  for (const ScheduledItem& it : plan.items) {
    it.seq->num_computed += it.n_tokens - it.guesses;
    // A completed prompt becomes shareable at once (siblings still waiting
    // for the same prefix hit the cache); later blocks are offered on Remove.
    if (it.seq->num_computed >= it.seq->prompt_len &&
        it.seq->inserted_blocks * block_size_ < it.seq->prompt_len)
      OfferToCache(it.seq);
    DropOutOfWindow(it.seq);
  }
}

void Scheduler::Append(SeqState* s, kv::BlockId b) {
  s->blocks.push_back(b);
  if (config_.slide_window > 0) s->slides.push_back(pool_.slide(b));
}

int Scheduler::FirstSlide(int pos) const {
  return std::max(0, pos - config_.slide_window + 1) / block_size_;
}

bool Scheduler::SlidesCover(std::span<const kv::BlockId> blocks) const {
  const int n = static_cast<int>(blocks.size());
  for (int i = FirstSlide(n * block_size_); i < n; ++i)
    if (pool_.slide(blocks[i]) == kv::kNoSlide) return false;
  return true;
}

void Scheduler::DropOutOfWindow(SeqState* s) {
  if (config_.slide_window > 0) {
    // The next query is at num_computed.
    const int drop = std::min(static_cast<int>(s->blocks.size()), FirstSlide(s->num_computed));
    for (int b = s->slides_from; b < drop; ++b) pool_.DropSlide(s->blocks[b]);
    s->slides_from = std::max(s->slides_from, drop);
  }
  if (config_.window <= 0 || s->num_computed < s->prompt_len) return;
  // The next query is at num_computed; every later one reads positions
  // from its own minus window - 1 on. Block b ends before that when
  // (b + 1) * block_size <= num_computed - window + 1.
  const int drop = std::min(static_cast<int>(s->blocks.size()),
                            (s->num_computed - config_.window + 1) / block_size_);
  if (drop <= s->dropped_blocks) return;
  // What it computed goes to the cache first, which keeps those blocks.
  OfferToCache(s);
  for (int b = s->dropped_blocks; b < drop; ++b) {
    pool_.Release(s->blocks[b]);
    s->blocks[b] = kv::kNoBlock;
  }
  s->dropped_blocks = drop;
}

void Scheduler::Remove(SeqState* s, bool insert) {
  if (s->status != SeqStatus::kFinished) {
    policy_.OnFinish(*s);
    auto l = ledgers_.find(s->client);
    if (l != ledgers_.end() && --l->second.live <= 0 && ledgers_.size() > kMaxIdleClients)
      ledgers_.erase(l);
  }
  if (insert) OfferToCache(s);
  ReleaseBlocks(s);
  if (auto it = std::find(running_.begin(), running_.end(), s); it != running_.end())
    running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), s); it != waiting_.end())
    waiting_.erase(it);
  s->status = SeqStatus::kFinished;
}

}  // namespace braid
