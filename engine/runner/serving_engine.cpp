// The serving engine: construction, submission, the step loop's admission
// of requests, and Engine::Open. A step's phases: serving_step.cpp and
// step_retire.cpp (serving_engine.h lists them).
#include "runner/serving_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/system_probe.h"
#include "runner/score_request.h"
#include "runner/stop_matcher.h"

namespace braid {

const char* GoalClassName(GoalClass g) {
  return g == GoalClass::kLatency ? "latency" : "throughput";
}

namespace {

// The largest pool sized from memory (as braid run's --kv-tokens).
constexpr int kMaxPoolTokens = 4 << 20;

// The scheduler's settings from the engine's.
SchedulerConfig SchedulerConfigOf(const EngineOptions& o, const ModelConfig& model, bool slides) {
  SchedulerConfig c;
  c.window = model.AttentionWindow();
  c.slide_window = slides ? model.sliding_window : 0;
  c.max_running = o.max_running;
  c.max_batch_tokens = o.max_batch_tokens;
  c.latency_batch_tokens = o.latency_batch_tokens;
  c.growth_reserve = o.kv_growth_reserve;
  c.anti_thrash = o.anti_thrash;
  return c;
}

}  // namespace

ServingEngine::ServingEngine(const EngineOptions& o, std::unique_ptr<BackendModel> model,
                             std::unique_ptr<Model> draft,
                             std::unique_ptr<DraftRunner> draft_runner,
                             std::unique_ptr<KvMemory> kv, std::unique_ptr<AdmissionPolicy> policy,
                             uint64_t kv_memory_available)
    : options_(o),
      model_(std::move(model)),
      draft_(std::move(draft)),
      draft_runner_(std::move(draft_runner)),
      kv_(std::move(kv)),
      policy_(std::move(policy)),
      pool_(kv_->n_blocks(), kv_->n_slides()),
      cache_(pool_, o.block_size,
             o.evict == "next-use" ? kv::EvictOrder::kNextUse : kv::EvictOrder::kLru),
      scheduler_(SchedulerConfigOf(o, model_->config(), kv_->n_slides() > 0), pool_, cache_,
                 *policy_),
      latency_budget_(o.max_batch_tokens),
      step_budget_(o.max_batch_tokens, o.step_ms, o.block_size),
      step_cost_(model_->backend().max_chunk()),
      eog_ids_(EndOfGenerationIds(*model_)),
      batch_(model_->config().n_vocab, eog_ids_) {
  scheduler_.set_latency_budget(&latency_budget_);
  if (o.step_ms > 0) scheduler_.set_step_budget(&step_budget_);
  // Contexts held through tool calls (ExpectUse) never take more than half
  // the pool: the rest stays for work that is here now.
  cache_.set_max_held_blocks(pool_.num_blocks() / 2);
  stats_.kv_blocks_total = stats_.kv_blocks_free = pool_.num_blocks();
  stats_.kv_slides_total = pool_.num_slides();
  stats_.kv_pool_bytes = kv_->bytes();
  stats_.kv_memory_available = kv_memory_available;
  loop_ = std::thread([this] { Loop(); });
}

Result<std::shared_ptr<RequestHandle>> ServingEngine::Submit(GenerationRequest r,
                                                             DeltaCallback cb) {
  BRAID_RETURN_IF_ERROR(r.sampling.Validate());
  if (r.prompt.empty() && !r.prompt_text.empty()) r.prompt = model_->TokenizeText(r.prompt_text);
  if (!r.score_choices.empty()) return SubmitScoring(std::move(r), std::move(cb));
  BRAID_RETURN_IF_ERROR(ValidateRequest(r));
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Status::Cancelled("the engine is shutting down");
  if (static_cast<int>(inbox_.size()) + waiting_count_ >= options_.max_waiting)
    return Status::ResourceExhausted("the queue is full (" + std::to_string(options_.max_waiting) +
                                     " requests waiting)");
  auto req = std::make_shared<ServingRequest>(++next_id_, std::move(r), std::move(cb),
                                              model_->tokenizer());
  inbox_.push_back(req);
  cv_.notify_one();
  return std::shared_ptr<RequestHandle>(req);
}

// A generation request's prompt (tokenized), lengths and options.
Status ServingEngine::ValidateRequest(const GenerationRequest& r) const {
  if (r.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  const int n_vocab = model_->config().n_vocab;
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab)
      return Status::InvalidArgument("prompt token " + std::to_string(i) + " is " +
                                     std::to_string(r.prompt[i]) + ", outside the vocabulary [0, " +
                                     std::to_string(n_vocab) + ")");
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.sampling.max_tokens;
  const int context = model_->info().context;
  if (total > context)
    return Status::OutOfRange("the prompt has " + std::to_string(r.prompt.size()) +
                              " tokens and max_tokens is " + std::to_string(r.sampling.max_tokens) +
                              ": together more than the context of " + std::to_string(context));
  // A model whose layers all slide holds its window, not the whole sequence.
  const int peak =
      scheduler_.PeakBlocks(static_cast<int>(r.prompt.size()), static_cast<int>(total));
  if (peak > pool_.num_blocks())
    return Status::OutOfRange(
        "the request needs " +
        std::to_string(scheduler_.config().window > 0 ? peak * options_.block_size : total) +
        " tokens of KV cache at once but the pool holds " +
        std::to_string(pool_.num_blocks() * options_.block_size));
  if (r.top_logprobs > 20)
    return Status::InvalidArgument("top_logprobs must be at most 20, got " +
                                   std::to_string(r.top_logprobs));
  if (r.deadline_ms && !(*r.deadline_ms >= 0))
    return Status::InvalidArgument("deadline_ms must be >= 0");
  if (r.prompt_logprobs_from >= static_cast<int64_t>(r.prompt.size()) ||
      r.prompt_logprobs_from == 0 || r.prompt_logprobs_from < -1)
    return Status::InvalidArgument("prompt_logprobs_from must be -1 or in [1, " +
                                   std::to_string(r.prompt.size()) + "), got " +
                                   std::to_string(r.prompt_logprobs_from));
  return Status::Ok();
}

Result<std::shared_ptr<RequestHandle>> ServingEngine::SubmitScoring(GenerationRequest r,
                                                                    DeltaCallback cb) {
  if (r.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  if (r.score_choices.size() > 64)
    return Status::InvalidArgument("at most 64 choices can be scored, got " +
                                   std::to_string(r.score_choices.size()));
  for (size_t i = 0; i < r.score_choices.size(); ++i)
    if (r.score_choices[i].empty())
      return Status::InvalidArgument("choice " + std::to_string(i) + " has no tokens");
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = ++next_id_;
  }
  auto req = std::make_shared<ScoreRequest>(
      id, std::move(r), std::move(cb),
      [this](GenerationRequest g, DeltaCallback c) { return Submit(std::move(g), std::move(c)); });
  BRAID_RETURN_IF_ERROR(req->Start());
  return std::shared_ptr<RequestHandle>(req);
}

int ServingEngine::ProbePrefix(const std::vector<int32_t>& tokens, uint64_t salt) {
  std::lock_guard<std::mutex> lock(kv_mu_);
  return cache_.Probe(salt, tokens);
}

int ServingEngine::Prefetch(const std::vector<int32_t>& tokens, uint64_t salt) {
  std::lock_guard<std::mutex> lock(kv_mu_);
  return tier_io_ ? tier_io_->Prefetch(salt, tokens) * options_.block_size : 0;
}

uint64_t ServingEngine::Pin(const std::vector<int32_t>& tokens, uint64_t salt) {
  std::lock_guard<std::mutex> lock(kv_mu_);
  return cache_.Pin(salt, tokens);
}

void ServingEngine::Unpin(uint64_t pin) {
  std::lock_guard<std::mutex> lock(kv_mu_);
  if (pin) cache_.Unpin(pin);
}

uint64_t ServingEngine::ExpectUse(const std::vector<int32_t>& tokens, uint64_t salt, double in_ms,
                                  bool hold) {
  const double when = Ms(origin_, ServingClock::now()) + std::max(0.0, in_ms);
  std::lock_guard<std::mutex> lock(kv_mu_);
  // What the lower tier holds of it comes back first, so that the
  // expectation covers it too.
  if (tier_io_) tier_io_->Prefetch(salt, tokens);
  return cache_.Expect(salt, tokens, when, hold);
}

Status ServingEngine::OpenTier(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(kv_mu_);
  BRAID_ASSIGN_OR_RETURN(tier_io_, TierIo::Open(*kv_, bytes, options_.block_size, pool_, cache_,
                                                options_.kv_host_prefetch));
  scheduler_.set_tier(&tier_io_->tier());
  cache_.set_evict_sink(
      [io = tier_io_.get()](uint64_t salt, uint64_t parent, std::span<const int32_t> tokens,
                            kv::BlockId block) { io->OnEvict(salt, parent, tokens, block); });
  return Status::Ok();
}

void ServingEngine::ForgetUse(uint64_t id) {
  std::lock_guard<std::mutex> lock(kv_mu_);
  cache_.Forget(id);
}

EngineStats ServingEngine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> kv_lock(kv_mu_);
    for (const auto& [client, c] : scheduler_.ClientServices())
      s.clients.push_back({client, c.prompt_tokens, c.generated_tokens, c.waiting, c.running,
                           policy_->counter(client)});
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    std::vector<EngineStats::ClientStats> clients = std::move(s.clients);
    s = stats_;
    s.clients = std::move(clients);
  }
  {
    std::lock_guard<std::mutex> kv_lock(kv_mu_);
    if (tier_io_) tier_io_->AddStats(&s);
  }
  if (options_.model.cpu.profile_stages)
    model_->backend().StageProfile(&s.profiled_passes, &s.forward_stages);
  model_->backend().CascadeCounts(&s.cascade_passes, &s.cascade_tokens);
  model_->backend().PoolCounts(&s.pool_passes, &s.pool_narrowed_passes);
  return s;
}

void ServingEngine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      if (!loop_.joinable()) return;
    }
    stopping_ = true;
    cv_.notify_all();
  }
  if (loop_.joinable()) loop_.join();
}

void ServingEngine::Loop() {
  Active active;
  for (;;) {
    std::vector<std::shared_ptr<ServingRequest>> fresh;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !inbox_.empty() || !active.empty(); });
      if (stopping_) {
        for (auto& r : inbox_) active.push_back(r);
        inbox_.clear();
        break;
      }
      fresh.swap(inbox_);
    }
    Admit(fresh, active);
    Step(active);
  }
  // Shutdown: everything still pending is cancelled.
  std::lock_guard<std::mutex> lock(kv_mu_);
  for (auto& r : active) {
    if (r->finished()) continue;
    scheduler_.Remove(&r->seq(), /*insert=*/false);
    r->Finish("cancelled", ServingClock::now());
  }
}

void ServingEngine::Admit(std::vector<std::shared_ptr<ServingRequest>>& fresh, Active& active) {
  std::lock_guard<std::mutex> lock(kv_mu_);
  for (auto& r : fresh) {
    Prepare(*r);
    const SeqState& s = r->seq();
    if (s.max_tokens == 0 && s.logprobs_from < 0) {
      r->Finish("length", ServingClock::now());
      continue;
    }
    scheduler_.Add(&r->seq());
    active.push_back(r);
  }
}

void ServingEngine::Prepare(ServingRequest& r) {
  SeqState& s = r.seq();
  const GenerationRequest& g = r.request();
  s.id = r.id();
  s.tokens = g.prompt;
  s.prompt_len = static_cast<int>(g.prompt.size());
  s.max_tokens = g.sampling.max_tokens;
  s.logprobs_from = g.prompt_logprobs_from;
  s.goal = g.goal;
  s.priority = g.priority;
  s.arrival = Ms(origin_, ServingClock::now()) / 1000.0;
  if (g.deadline_ms) s.deadline = s.arrival + *g.deadline_ms / 1000.0;
  s.salt = g.cache_salt;
  s.client = g.client;
  s.program = g.program;
  if (!options_.spec.on() || s.max_tokens <= 1) return;
  std::shared_ptr<spec::SuffixIndex> group;
  if (options_.spec.kind == SpecOptions::Kind::kSuffix && !g.spec_group.empty())
    group = suffix_store_.For(g.spec_group);
  if (draft_runner_) {
    r.Speculate(draft_runner_->NewSeq());
    // What the draft has earned lately, not optimism.
    r.acceptance() = spec::Acceptance(draft_acceptance_.rate());
  } else {
    r.Speculate(spec::MakeProposer(options_.spec, group), group);
  }
}

int KvBlocksForMemory(uint64_t available, double fraction, size_t block_bytes, int min_blocks,
                      int max_blocks) {
  const double fit = static_cast<double>(available) * fraction / static_cast<double>(block_bytes);
  const int64_t blocks = static_cast<int64_t>(std::min<double>(fit, max_blocks));
  return static_cast<int>(
      std::clamp<int64_t>(blocks, std::min(min_blocks, max_blocks), max_blocks));
}

namespace {

// The options Engine::Open checks before it loads the model.
Status ValidateOptions(const EngineOptions& o) {
  if (o.block_size < 1 || o.block_size > 1024)
    return Status::InvalidArgument("block_size must be in [1, 1024], got " +
                                   std::to_string(o.block_size));
  if (o.max_running < 0) return Status::InvalidArgument("max_running must be >= 1 (0 = default)");
  if (o.max_batch_tokens < 0)
    return Status::InvalidArgument("max_batch_tokens must be >= 1 (0 = default), got " +
                                   std::to_string(o.max_batch_tokens));
  if (!(o.kv_growth_reserve >= 0 && o.kv_growth_reserve <= 1))
    return Status::InvalidArgument("kv_growth_reserve must be in [0, 1], got " +
                                   std::to_string(o.kv_growth_reserve));
  if (o.latency_batch_tokens < 0)
    return Status::InvalidArgument(
        "latency_batch_tokens must be >= 0 (0 = learned from step times)");
  if (!(o.step_ms >= 0 && o.step_ms <= 1e6))
    return Status::InvalidArgument("step_ms must be in [0, 1000000] (0 = no target), got " +
                                   std::to_string(o.step_ms));
  if (o.kv_blocks < 0 || o.kv_tokens < 0)
    return Status::InvalidArgument("KV pool size must be >= 0");
  if (!(o.kv_memory_fraction >= 0.0 && o.kv_memory_fraction <= 0.95))
    return Status::InvalidArgument("kv_memory_fraction must be in (0, 0.95] (0 = default), got " +
                                   std::to_string(o.kv_memory_fraction));
  if (!(o.fairness.prompt_weight >= 0) || !(o.fairness.generated_weight >= 0) ||
      o.fairness.prompt_weight + o.fairness.generated_weight <= 0)
    return Status::InvalidArgument(
        "fairness weights of prompt and generated tokens must be >= 0, not both 0");
  if (!(o.fairness.cached_weight >= 0) || !std::isfinite(o.fairness.cached_weight))
    return Status::InvalidArgument("the fairness weight of cached prompt tokens must be >= 0");
  if (!(o.fairness.program_quantum >= 0) || !std::isfinite(o.fairness.program_quantum))
    return Status::InvalidArgument("the program quantum of fair sharing must be >= 0");
  for (const auto& [client, w] : o.fairness.client_weights)
    if (!(w > 0) || !std::isfinite(w))
      return Status::InvalidArgument("the weight of client '" + client + "' must be > 0, got " +
                                     std::to_string(w));
  if (o.kv_host_bytes < -1)
    return Status::InvalidArgument("kv_host_bytes must be >= 0 (or -1: a quarter of free memory)");
  if (o.evict != "lru" && o.evict != "next-use")
    return Status::InvalidArgument("unknown eviction order '" + o.evict + "' (lru or next-use)");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& options) {
  const EngineOptions& o = options;
  BRAID_RETURN_IF_ERROR(ValidateOptions(o));
  auto policy = MakePolicy(o.policy, o.fairness);
  if (!policy)
    return Status::InvalidArgument("unknown admission policy '" + o.policy +
                                   "' (fcfs, priority, vtc, lpm or plas)");
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<BackendModel> model, BackendModel::Load(o.model));
  Backend& backend = model->backend();
  // The choices left open go to the backend's defaults.
  EngineOptions r = options;
  const ServingDefaults defaults = backend.serving_defaults();
  if (r.max_running == 0) r.max_running = defaults.max_running;
  if (r.max_batch_tokens == 0)
    r.max_batch_tokens = std::min(defaults.step_tokens, backend.max_chunk());
  if (r.kv_memory_fraction == 0) r.kv_memory_fraction = defaults.kv_memory_fraction;
  if (r.kv_memory_split < 1)
    return Status::InvalidArgument("kv_memory_split must be >= 1, got " +
                                   std::to_string(r.kv_memory_split));
  if (r.max_batch_tokens > backend.max_chunk())
    return Status::InvalidArgument("max_batch_tokens must be in [1, " +
                                   std::to_string(backend.max_chunk()) + "], got " +
                                   std::to_string(r.max_batch_tokens));
  const uint64_t available = backend.KvMemoryAvailable();
  // Slides for a hybrid model's sliding layers: every running sequence's
  // window and a step's chunk, and a block at each end.
  const size_t slide_bytes =
      r.kv_slides && r.kv_host_bytes == 0 ? backend.KvSlideBytes(r.block_size) : 0;
  const int slides_per_sequence =
      (model->config().sliding_window + r.max_batch_tokens + r.block_size - 1) / r.block_size + 2;
  int slides = slide_bytes > 0 ? r.max_running * slides_per_sequence : 0;
  int blocks = r.kv_blocks > 0 ? r.kv_blocks : (r.kv_tokens + r.block_size - 1) / r.block_size;
  if (r.kv_blocks == 0 && r.kv_tokens == 0) {
    // The slides take at most half the share (one sequence's at least:
    // when fewer windows fit, sequences wait for slides), their bytes come
    // off it, and blocks cost the other layers'.
    const double fraction = r.kv_memory_fraction / r.kv_memory_split;
    if (slide_bytes > 0)
      slides = static_cast<int>(std::max<double>(
          slides_per_sequence,
          std::min<double>(slides, static_cast<double>(available) * fraction / 2 / slide_bytes)));
    const double for_slides = static_cast<double>(slides) * slide_bytes / fraction;
    blocks = KvBlocksForMemory(
        static_cast<uint64_t>(std::max(0.0, static_cast<double>(available) - for_slides)), fraction,
        backend.KvBlockBytes(r.block_size) - slide_bytes,
        (model->info().context + r.block_size - 1) / r.block_size, kMaxPoolTokens / r.block_size);
  }
  if (blocks < 1) return Status::InvalidArgument("the KV pool must hold at least one block");
  slides = std::min(slides, blocks);
  std::unique_ptr<KvMemory> kv;
  if (slides > 0) {
    BRAID_ASSIGN_OR_RETURN(kv, backend.AllocateSlidedKv(blocks, slides, r.block_size));
  } else {
    BRAID_ASSIGN_OR_RETURN(kv, backend.AllocateKv(blocks, r.block_size));
  }
  BRAID_RETURN_IF_ERROR(backend.Prepare(*kv, r.max_running));
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Model> draft, OpenDraftModel(r.spec, r.model, *model));
  // The draft's pool holds as many positions as the target's.
  std::unique_ptr<DraftRunner> runner;
  if (draft) {
    BRAID_ASSIGN_OR_RETURN(runner, DraftRunner::Open(*draft, blocks * r.block_size, r.block_size));
  }
  auto engine =
      std::make_unique<ServingEngine>(r, std::move(model), std::move(draft), std::move(runner),
                                      std::move(kv), std::move(policy), available);
  if (r.kv_host_bytes != 0) {
    const uint64_t host =
        r.kv_host_bytes > 0 ? static_cast<uint64_t>(r.kv_host_bytes) : AvailableMemoryBytes() / 4;
    BRAID_RETURN_IF_ERROR(engine->OpenTier(host));
  }
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace braid
