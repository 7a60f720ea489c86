// The serving engine: a step loop on its own thread that admits requests,
// asks the scheduler for a plan, runs one ragged batch through the model,
// samples, streams deltas and retires finished requests.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "backend/backend.h"
#include "engine/engine.h"
#include "kv/block_pool.h"
#include "kv/radix_cache.h"
#include "runner/backend_model.h"
#include "runner/draft_runner.h"
#include "runner/stop_matcher.h"
#include "sampling/sampler.h"
#include "sched/policy.h"
#include "sched/scheduler.h"
#include "spec/goodput.h"
#include "spec/proposer.h"
#include "tokenizer/tokenizer.h"

namespace braid {

const char* GoalClassName(GoalClass g) {
  return g == GoalClass::kLatency ? "latency" : "throughput";
}

namespace {

// The scheduler's settings from the engine's.
SchedulerConfig SchedulerConfigOf(const EngineOptions& o) {
  SchedulerConfig c;
  c.max_running = o.max_running;
  c.max_batch_tokens = o.max_batch_tokens;
  c.latency_batch_tokens = o.latency_batch_tokens;
  c.growth_reserve = o.kv_growth_reserve;
  c.anti_thrash = o.anti_thrash;
  return c;
}

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// One request: the caller-facing handle (deltas, result, cancel) and the
// step loop's working state (sequence, sampler, text streaming).
class Request final : public RequestHandle {
 public:
  Request(uint64_t id, GenerationRequest req, DeltaCallback cb, const Tokenizer* tok)
      : id_(id),
        req_(std::move(req)),
        cb_(std::move(cb)),
        sampler_(req_.sampling),
        stops_(req_.sampling.stop) {
    if (tok) decoder_ = std::make_unique<StreamDecoder>(*tok);
    submitted_ = Clock::now();
  }

  // ---- RequestHandle (any thread) ----
  uint64_t id() const override { return id_; }
  std::optional<Delta> Next(int timeout_ms) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return !queue_.empty() || taken_final_ || done_; };
    if (timeout_ms < 0)
      cv_.wait(lock, ready);
    else
      cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    if (queue_.empty()) return std::nullopt;
    Delta d = std::move(queue_.front());
    queue_.pop_front();
    if (d.finished) taken_final_ = true;
    return d;
  }
  Completion Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return result_;
  }
  bool finished() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void Cancel() override { cancel_.store(true); }
  void SetGoal(GoalClass goal, int priority, std::optional<double> deadline_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    goal_change_ = GoalChange{goal, priority, deadline_ms};
  }

  // ---- step loop only ----
  bool cancel_requested() const { return cancel_.load(); }
  // Applies a pending SetGoal to the sequence (`now`: engine clock, seconds).
  bool ApplyGoalChange(double now) {
    std::optional<GoalChange> g;
    {
      std::lock_guard<std::mutex> lock(mu_);
      g.swap(goal_change_);
    }
    if (!g) return false;
    seq_.goal = g->goal;
    seq_.priority = g->priority;
    if (g->deadline_ms) seq_.deadline = now + *g->deadline_ms / 1000.0;
    return true;
  }
  SeqState& seq() { return seq_; }
  const GenerationRequest& request() const { return req_; }
  Sampler& sampler() { return sampler_; }

  // Speculation: the proposer (null: none), and `group`, the index of
  // sibling outputs this request's output joins when it ends (may be null);
  // or the draft model's state for it.
  void Speculate(std::unique_ptr<spec::Proposer> proposer,
                 std::shared_ptr<spec::SuffixIndex> group) {
    proposer_ = std::move(proposer);
    group_ = std::move(group);
  }
  void Speculate(std::unique_ptr<DraftRunner::Seq> draft) { draft_ = std::move(draft); }
  bool speculates() const { return proposer_ || draft_; }
  spec::Proposer* proposer() { return proposer_.get(); }
  DraftRunner::Seq* draft() { return draft_.get(); }
  spec::Acceptance& acceptance() { return acceptance_; }
  // This step's tokens when it checks guesses: the last token, then the guesses.
  std::vector<int32_t>& pass() { return pass_; }
  void CountGuesses(int proposed, int accepted) {
    result_.spec_proposed += proposed;
    result_.spec_accepted += accepted;
    acceptance_.Observe(proposed, accepted);
  }

  // Records a sampled token; returns true when it ends the request.
  bool OnToken(int32_t id, const TokenLogprob* lp, bool eog, Clock::time_point now) {
    Delta d;
    if (!first_token_) {
      first_token_ = true;
      result_.timings.ttft_ms = Ms(submitted_, now);
    } else {
      result_.timings.inter_token_ms.push_back(Ms(last_token_, now));
    }
    last_token_ = now;
    const SamplingParams& sp = req_.sampling;
    bool stop_token = eog;
    for (int32_t s : sp.stop_tokens) stop_token |= s == id;
    if (stop_token) return Finish("stop", now);
    seq_.tokens.push_back(id);
    result_.tokens.push_back(id);
    d.tokens.push_back(id);
    if (lp) {
      d.logprobs.push_back(*lp);
      result_.logprobs.push_back(*lp);
    }
    bool hit = false;
    // Stop strings are looked for from the token after min_tokens on.
    if (decoder_)
      d.text = seq_.generated() <= sp.min_tokens ? decoder_->Push(id)
                                                 : stops_.Push(decoder_->Push(id), &hit);
    result_.text += d.text;
    Emit(std::move(d));
    if (hit) {
      stop_hit_ = true;
      return Finish("stop", now);
    }
    if (seq_.generated() >= seq_.max_tokens) return Finish("length", now);
    return false;
  }

  // Ends the request: flushes held-back text, fills in usage, wakes waiters.
  bool Finish(const std::string& reason, Clock::time_point now, const std::string& error = "") {
    Delta d;
    if (decoder_ && !stop_hit_ && reason != "cancelled" && reason != "error") {
      bool hit = false;
      d.text = stops_.Push(decoder_->Flush(), &hit);
      if (!hit) d.text += stops_.Flush();
      result_.text += d.text;
    }
    d.finished = true;
    d.finish_reason = reason;
    d.error = error;
    result_.finish_reason = reason;
    result_.error = error;
    result_.usage.prompt_tokens = seq_.prompt_len;
    result_.usage.cached_tokens = seq_.cached_tokens;
    result_.usage.generated_tokens = static_cast<int>(result_.tokens.size());
    result_.timings.total_ms = Ms(submitted_, now);
    result_.preemptions = seq_.preemptions;
    // A finished output is what the siblings' guesses come from.
    if (group_ && (reason == "stop" || reason == "length") && !result_.tokens.empty())
      group_->Add(result_.tokens);
    if (!scheduled_) result_.timings.queue_ms = result_.timings.total_ms;
    draft_.reset();  // its draft KV blocks go back now
    Emit(std::move(d), /*final=*/true);
    return true;
  }

  // Log-probability of prompt token `pos` (idempotent: recompute after a
  // preemption writes the same slot again).
  void SetPromptLogprob(int pos, float lp) {
    const int from = req_.prompt_logprobs_from;
    result_.prompt_logprobs.resize(req_.prompt.size() - from);
    result_.prompt_logprobs[pos - from] = lp;
  }

  void MarkScheduled(Clock::time_point now) {
    if (scheduled_) return;
    scheduled_ = true;
    result_.timings.queue_ms = Ms(submitted_, now);
  }

 private:
  // The delta is queued (and the request marked done) before the callback
  // runs, so a callback may call Wait() on this request.
  void Emit(Delta d, bool final = false) {
    Delta copy;
    if (cb_) copy = d;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(d));
      if (final) done_ = true;
      cv_.notify_all();
    }
    if (cb_) cb_(copy);
  }

  const uint64_t id_;
  GenerationRequest req_;
  DeltaCallback cb_;
  SeqState seq_;
  Sampler sampler_;
  std::unique_ptr<StreamDecoder> decoder_;
  StopMatcher stops_;
  std::unique_ptr<spec::Proposer> proposer_;
  std::shared_ptr<spec::SuffixIndex> group_;
  std::unique_ptr<DraftRunner::Seq> draft_;
  spec::Acceptance acceptance_;
  std::vector<int32_t> pass_;
  std::atomic<bool> cancel_{false};
  struct GoalChange {
    GoalClass goal;
    int priority;
    std::optional<double> deadline_ms;
  };
  std::optional<GoalChange> goal_change_;  // guarded by mu_
  Clock::time_point submitted_, last_token_;
  bool first_token_ = false, scheduled_ = false, stop_hit_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delta> queue_;
  bool done_ = false, taken_final_ = false;
  Completion result_;
};

// log-softmax of a logit row: the sampled token's logprob and the top k.
TokenLogprob Logprobs(std::span<const float> logits, int32_t id, int k) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l - max));
  const float log_z = max + static_cast<float>(std::log(z));
  TokenLogprob lp;
  lp.id = id;
  lp.logprob = logits[id] - log_z;
  if (k > 0) {
    std::vector<int32_t> idx(logits.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    k = std::min<int>(k, static_cast<int>(idx.size()));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (int i = 0; i < k; ++i) lp.top.emplace_back(idx[i], logits[idx[i]] - log_z);
  }
  return lp;
}

// A scoring request: one prompt-only request per choice (prompt + choice,
// log-probabilities from the choice on). The first runs alone so that the
// others find the prompt in the prefix cache.
class ScoreRequest final : public RequestHandle, public std::enable_shared_from_this<ScoreRequest> {
 public:
  using SubmitFn =
      std::function<Result<std::shared_ptr<RequestHandle>>(GenerationRequest, DeltaCallback)>;
  ScoreRequest(uint64_t id, GenerationRequest req, DeltaCallback cb, SubmitFn submit)
      : id_(id), req_(std::move(req)), cb_(std::move(cb)), submit_(std::move(submit)) {
    result_.choice_logprobs.assign(req_.score_choices.size(), 0.0f);
    result_.usage.prompt_tokens = static_cast<int>(req_.prompt.size());
  }

  Status Start() { return SubmitChoice(0); }

  uint64_t id() const override { return id_; }
  std::optional<Delta> Next(int timeout_ms) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return done_; };
    if (timeout_ms < 0)
      cv_.wait(lock, ready);
    else
      cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    if (!done_ || taken_) return std::nullopt;
    taken_ = true;
    Delta d;
    d.finished = true;
    d.finish_reason = result_.finish_reason;
    d.error = result_.error;
    return d;
  }
  Completion Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return result_;
  }
  bool finished() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void Cancel() override {
    std::vector<std::shared_ptr<RequestHandle>> children;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      children = children_;
    }
    for (auto& c : children) c->Cancel();
  }
  void SetGoal(GoalClass goal, int priority, std::optional<double> deadline_ms) override {
    std::vector<std::shared_ptr<RequestHandle>> children;
    {
      std::lock_guard<std::mutex> lock(mu_);
      req_.goal = goal;  // for the choices not launched yet
      req_.priority = priority;
      req_.deadline_ms = deadline_ms;
      children = children_;
    }
    for (auto& c : children)
      if (c) c->SetGoal(goal, priority, deadline_ms);
  }

 private:
  Status SubmitChoice(size_t i) {
    GenerationRequest g;
    g.prompt = req_.prompt;
    g.prompt.insert(g.prompt.end(), req_.score_choices[i].begin(), req_.score_choices[i].end());
    g.prompt_logprobs_from = static_cast<int>(req_.prompt.size());
    g.sampling = SamplingParams::Greedy();
    g.sampling.max_tokens = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);  // SetGoal may change them
      g.goal = req_.goal;
      g.priority = req_.priority;
      g.deadline_ms = req_.deadline_ms;
    }
    g.cache_salt = req_.cache_salt;
    g.client = req_.client;
    // A weak reference: children must not keep their parent alive (the
    // parent holds the children; the caller holds the parent).
    std::weak_ptr<ScoreRequest> weak = weak_from_this();
    auto h = submit_(std::move(g), [weak, i](const Delta& d) {
      if (!d.finished) return;
      if (auto self = weak.lock()) self->OnChild(i);
    });
    if (!h.ok()) return h.status();
    std::lock_guard<std::mutex> lock(mu_);
    children_.resize(std::max(children_.size(), i + 1));
    children_[i] = *h;
    cv_.notify_all();
    return Status::Ok();
  }

  // Runs on the engine thread when child i finished.
  void OnChild(size_t i) {
    std::shared_ptr<RequestHandle> child;
    {
      // The submitting thread may not have stored the handle yet.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return i < children_.size() && children_[i]; });
      child = children_[i];
    }
    Completion c = child ? child->Wait() : Completion();
    bool last = false, launch_rest = false, failed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (c.finish_reason != "length") {
        failed = true;
        if (result_.error.empty())
          result_.error =
              c.error.empty() ? "choice " + std::to_string(i) + " " + c.finish_reason : c.error;
      }
      float sum = 0;
      for (float x : c.prompt_logprobs) sum += x;
      result_.choice_logprobs[i] = sum;
      if (i == 0) result_.usage.cached_tokens = c.usage.cached_tokens;
      ++finished_children_;
      last = finished_children_ == req_.score_choices.size();
      launch_rest = i == 0 && !cancelled_ && !failed && req_.score_choices.size() > 1;
    }
    if (launch_rest) {
      for (size_t k = 1; k < req_.score_choices.size(); ++k) {
        Status s = SubmitChoice(k);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu_);
          result_.error = s.message();
          finished_children_ += req_.score_choices.size() - k;
          last = true;
          break;
        }
      }
    }
    if (failed && i == 0) last = true;  // nothing else was started
    if (!last) return;
    Delta d;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_) return;
      result_.finish_reason = cancelled_ ? "cancelled" : !result_.error.empty() ? "error" : "stop";
      done_ = true;
      children_.clear();
      d.finished = true;
      d.finish_reason = result_.finish_reason;
      d.error = result_.error;
    }
    if (cb_) cb_(d);
    cv_.notify_all();
  }

  const uint64_t id_;
  GenerationRequest req_;
  DeltaCallback cb_;
  SubmitFn submit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<RequestHandle>> children_;
  size_t finished_children_ = 0;
  bool done_ = false, taken_ = false, cancelled_ = false;
  Completion result_;
};

class ServingEngine final : public Engine {
 public:
  // `kv` (from model's backend) holds the pool's blocks.
  ServingEngine(const EngineOptions& o, std::unique_ptr<BackendModel> model,
                std::unique_ptr<Model> draft, std::unique_ptr<DraftRunner> draft_runner,
                std::unique_ptr<KvMemory> kv, std::unique_ptr<AdmissionPolicy> policy,
                uint64_t kv_memory_available)
      : options_(o),
        model_(std::move(model)),
        draft_(std::move(draft)),
        draft_runner_(std::move(draft_runner)),
        kv_(std::move(kv)),
        policy_(std::move(policy)),
        pool_(kv_->n_blocks()),
        cache_(pool_, o.block_size,
               o.evict == "next-use" ? kv::EvictOrder::kNextUse : kv::EvictOrder::kLru),
        scheduler_(SchedulerConfigOf(o), pool_, cache_, *policy_),
        latency_budget_(o.max_batch_tokens),
        step_cost_(model_->backend().max_chunk()),
        eog_ids_(EndOfGenerationIds(*model_)) {
    scheduler_.set_latency_budget(&latency_budget_);
    // Contexts held through tool calls (ExpectUse) never take more than half
    // the pool: the rest stays for work that is here now.
    cache_.set_max_held_blocks(pool_.num_blocks() / 2);
    stats_.kv_blocks_total = stats_.kv_blocks_free = pool_.num_blocks();
    stats_.kv_pool_bytes = kv_->bytes();
    stats_.kv_memory_available = kv_memory_available;
    loop_ = std::thread([this] { Loop(); });
  }
  ~ServingEngine() override { Shutdown(); }

  Result<std::shared_ptr<RequestHandle>> Submit(GenerationRequest r, DeltaCallback cb) override {
    BRAID_RETURN_IF_ERROR(r.sampling.Validate());
    if (r.prompt.empty() && !r.prompt_text.empty()) r.prompt = model_->TokenizeText(r.prompt_text);
    if (!r.score_choices.empty()) return SubmitScoring(std::move(r), std::move(cb));
    if (r.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
    const int n_vocab = model_->config().n_vocab;
    for (size_t i = 0; i < r.prompt.size(); ++i)
      if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab)
        return Status::InvalidArgument(
            "prompt token " + std::to_string(i) + " is " + std::to_string(r.prompt[i]) +
            ", outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.sampling.max_tokens;
    const int context = model_->info().context;
    if (total > context)
      return Status::OutOfRange("the prompt has " + std::to_string(r.prompt.size()) +
                                " tokens and max_tokens is " +
                                std::to_string(r.sampling.max_tokens) +
                                ": together more than the context of " + std::to_string(context));
    if (scheduler_.BlocksFor(static_cast<int>(total)) > pool_.num_blocks())
      return Status::OutOfRange("the request needs " + std::to_string(total) +
                                " tokens of KV cache but the pool holds " +
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
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::Cancelled("the engine is shutting down");
    if (static_cast<int>(inbox_.size()) + waiting_count_ >= options_.max_waiting)
      return Status::ResourceExhausted("the queue is full (" +
                                       std::to_string(options_.max_waiting) + " requests waiting)");
    auto req =
        std::make_shared<Request>(++next_id_, std::move(r), std::move(cb), model_->tokenizer());
    inbox_.push_back(req);
    cv_.notify_one();
    return std::shared_ptr<RequestHandle>(req);
  }

  Result<std::shared_ptr<RequestHandle>> SubmitScoring(GenerationRequest r, DeltaCallback cb) {
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
    auto req = std::make_shared<ScoreRequest>(id, std::move(r), std::move(cb),
                                              [this](GenerationRequest g, DeltaCallback c) {
                                                return Submit(std::move(g), std::move(c));
                                              });
    BRAID_RETURN_IF_ERROR(req->Start());
    return std::shared_ptr<RequestHandle>(req);
  }

  int ProbePrefix(const std::vector<int32_t>& tokens, uint64_t salt) override {
    std::lock_guard<std::mutex> lock(kv_mu_);
    return cache_.Probe(salt, tokens);
  }
  uint64_t Pin(const std::vector<int32_t>& tokens, uint64_t salt) override {
    std::lock_guard<std::mutex> lock(kv_mu_);
    return cache_.Pin(salt, tokens);
  }
  void Unpin(uint64_t pin) override {
    std::lock_guard<std::mutex> lock(kv_mu_);
    if (pin) cache_.Unpin(pin);
  }
  uint64_t ExpectUse(const std::vector<int32_t>& tokens, uint64_t salt, double in_ms,
                     bool hold) override {
    const double when = Ms(origin_, Clock::now()) + std::max(0.0, in_ms);
    std::lock_guard<std::mutex> lock(kv_mu_);
    return cache_.Expect(salt, tokens, when, hold);
  }
  void ForgetUse(uint64_t id) override {
    std::lock_guard<std::mutex> lock(kv_mu_);
    cache_.Forget(id);
  }

  EngineStats stats() const override {
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
    if (options_.model.cpu.profile_stages)
      model_->backend().StageProfile(&s.profiled_passes, &s.forward_stages);
    model_->backend().CascadeCounts(&s.cascade_passes, &s.cascade_tokens);
    model_->backend().PoolCounts(&s.pool_passes, &s.pool_narrowed_passes);
    return s;
  }
  Model* model() override { return model_.get(); }

  void Shutdown() override {
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

 private:
  void Loop();
  void Step(std::vector<std::shared_ptr<Request>>& active);
  // A step whose forward pass failed: every request in it finishes with the
  // error (their KV, from the same pass, is not offered to the prefix cache).
  void FailStep(const StepPlan& plan, std::vector<std::shared_ptr<Request>>& active,
                const Status& error, Clock::time_point now, uint64_t cancelled, uint64_t preempted);
  // Draws the next token of r from a logits row (its logits processor,
  // penalties and sampler); `lp` gets its log-probabilities when asked for.
  int32_t SampleRow(Request& r, std::span<float> logits, TokenLogprob* lp) const {
    const SeqState& s = r.seq();
    const SamplingParams& sp = r.request().sampling;
    if (s.generated() < sp.min_tokens) MaskEnds(logits, eog_ids_, sp);
    if (r.request().logits_processor)
      r.request().logits_processor(
          std::span<const int32_t>(s.tokens.data() + s.prompt_len, s.tokens.size() - s.prompt_len),
          logits);
    const int k = r.request().top_logprobs;
    std::vector<float> raw;
    if (k >= 0) raw.assign(logits.begin(), logits.end());
    const int32_t id = r.sampler().Sample(logits, s.tokens);
    if (k >= 0) *lp = Logprobs(raw, id, k);
    return id;
  }
  // Speculation stage: decodes of the plan get their requests' guesses, as
  // many as pay at this step's size (spec/goodput.h).
  void AddGuesses(StepPlan& plan, const std::unordered_map<const SeqState*, Request*>& by_seq);
  // First position of an item whose logits are needed: the last token when
  // it samples (from the last token on when it checks guesses), earlier ones
  // for prompt log-probabilities.
  static int LogitsFrom(const ScheduledItem& it) {
    if (it.guesses > 0) return it.start;
    const int last = it.start + it.n_tokens - 1;
    int from = it.sample ? last : BatchSegment::kNoLogits;
    if (it.seq->logprobs_from > 0) {
      const int want = std::max(it.start, it.seq->logprobs_from - 1);
      if (want < it.seq->prompt_len - 1 && want <= last) from = std::min(from, want);
    }
    // Rows must be contiguous up to the end of the segment.
    return from;
  }
  // Copies the queue and pool gauges into stats_ (holding kv_mu_ and stats_mu_).
  void RefreshGauges() {
    stats_.running = scheduler_.num_running();
    stats_.waiting = scheduler_.num_waiting();
    stats_.kv_blocks_total = pool_.num_blocks();
    stats_.kv_pool_bytes = kv_->bytes();
    stats_.kv_blocks_free = pool_.num_free();
    stats_.kv_blocks_cached = cache_.stats().cached_blocks;
  }

  EngineOptions options_;
  std::unique_ptr<BackendModel> model_;
  std::unique_ptr<Model> draft_;  // the draft model (null unless spec draft)
  std::unique_ptr<DraftRunner> draft_runner_;
  // Every draft request's acceptance together (step loop only): a new
  // request's starting point. It starts low, as a draft costs passes to
  // find out that it is wrong.
  spec::Acceptance draft_acceptance_{spec::kCostlyPrior};
  spec::ProbeSchedule draft_probes_;  // step loop only
  std::unique_ptr<KvMemory> kv_;  // the blocks' numbers; pool_ and cache_ say whose they are
  std::unique_ptr<AdmissionPolicy> policy_;
  kv::BlockPool pool_;
  kv::RadixCache cache_;
  Scheduler scheduler_;
  LatencyBudget latency_budget_;  // step loop only
  spec::StepCost step_cost_;      // step loop only
  const std::vector<int32_t> eog_ids_;  // masked before a request's min_tokens (SampleRow)
  spec::SuffixStore suffix_store_;
  // AddGuesses' scratch: the items that may guess, their candidates, and
  // the draft model's jobs.
  std::vector<ScheduledItem*> guess_items_;
  std::vector<spec::Candidate> candidates_;
  std::vector<DraftRunner::Job> guess_jobs_;
  mutable std::mutex kv_mu_;  // pool, cache and scheduler: the loop holds it during planning

  std::mutex mu_;  // inbox and stop flag
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Request>> inbox_;
  int waiting_count_ = 0;
  bool stopping_ = false;
  uint64_t next_id_ = 0;

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::vector<float> logits_;
  // A greedy step's tokens, one per row (ForwardArgmax), or each row's top
  // k ids with their logits in top_values_ (ForwardTopK).
  std::vector<int32_t> ids_;
  std::vector<float> top_values_;
  const Clock::time_point origin_ = Clock::now();  // the engine clock's zero
  std::thread loop_;
};

void ServingEngine::Loop() {
  std::vector<std::shared_ptr<Request>> active;  // admitted to the scheduler, not finished
  for (;;) {
    std::vector<std::shared_ptr<Request>> fresh;
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
    {
      std::lock_guard<std::mutex> lock(kv_mu_);
      for (auto& r : fresh) {
        SeqState& s = r->seq();
        const GenerationRequest& g = r->request();
        s.id = r->id();
        s.tokens = g.prompt;
        s.prompt_len = static_cast<int>(g.prompt.size());
        s.max_tokens = g.sampling.max_tokens;
        s.logprobs_from = g.prompt_logprobs_from;
        s.goal = g.goal;
        s.priority = g.priority;
        s.arrival = Ms(origin_, Clock::now()) / 1000.0;
        if (g.deadline_ms) s.deadline = s.arrival + *g.deadline_ms / 1000.0;
        s.salt = g.cache_salt;
        s.client = g.client;
        s.program = g.program;
        if (options_.spec.on() && s.max_tokens > 1) {
          std::shared_ptr<spec::SuffixIndex> group;
          if (options_.spec.kind == SpecOptions::Kind::kSuffix && !g.spec_group.empty())
            group = suffix_store_.For(g.spec_group);
          if (draft_runner_) {
            r->Speculate(draft_runner_->NewSeq());
            // What the draft has earned lately, not optimism.
            r->acceptance() = spec::Acceptance(draft_acceptance_.rate());
          } else
            r->Speculate(spec::MakeProposer(options_.spec, group), group);
        }
        if (s.max_tokens == 0 && s.logprobs_from < 0) {
          r->Finish("length", Clock::now());
          continue;
        }
        scheduler_.Add(&s);
        active.push_back(r);
      }
    }
    Step(active);
  }
  // Shutdown: everything still pending is cancelled.
  std::lock_guard<std::mutex> lock(kv_mu_);
  for (auto& r : active) {
    if (r->finished()) continue;
    scheduler_.Remove(&r->seq(), /*insert=*/false);
    r->Finish("cancelled", Clock::now());
  }
}

void ServingEngine::FailStep(const StepPlan& plan, std::vector<std::shared_ptr<Request>>& active,
                             const Status& error, Clock::time_point now, uint64_t cancelled,
                             uint64_t preempted) {
  std::unordered_map<const SeqState*, Request*> by_seq;
  for (auto& r : active) by_seq[&r->seq()] = r.get();
  uint64_t finished = 0;
  int waiting;
  {
    std::lock_guard<std::mutex> lock(kv_mu_);
    for (const ScheduledItem& it : plan.items) {
      Request* r = by_seq[it.seq];
      if (r == nullptr || r->finished()) continue;
      r->MarkScheduled(now);
      r->Finish("error", now, error.message());
      scheduler_.Remove(it.seq, /*insert=*/false);
      ++finished;
    }
    std::erase_if(active, [](const auto& r) { return r->finished(); });
    std::lock_guard<std::mutex> slock(stats_mu_);
    RefreshGauges();
    stats_.requests_finished += finished;
    stats_.requests_cancelled += cancelled;
    stats_.preemptions += preempted;
    waiting = scheduler_.num_waiting();
  }
  std::lock_guard<std::mutex> lock(mu_);
  waiting_count_ = waiting;
}

void ServingEngine::AddGuesses(StepPlan& plan,
                               const std::unordered_map<const SeqState*, Request*>& by_seq) {
  int sampling = 0;
  for (const ScheduledItem& it : plan.items) sampling += it.sample;
  const bool adaptive = options_.spec.adaptive;
  // Acceptance is probed only where a guess could pay at all.
  const bool could_pay = !adaptive || spec::GuessCouldPay(step_cost_, plan.n_tokens, sampling);
  // A draft model's guesses cost passes of their own: how many each sequence
  // checks is chosen first, and only those are made. Model-free guesses are
  // made first, and the choice is among what they offer.
  const bool costly = draft_runner_ != nullptr;
  if (costly && !could_pay) return;
  guess_items_.clear();
  candidates_.clear();
  for (ScheduledItem& it : plan.items) {
    if (!it.sample) continue;
    const SeqState& s = *it.seq;
    Request* r = by_seq.at(it.seq);
    // Decodes only; a guess must leave room for the token after it.
    const int room = s.max_tokens - s.generated() - 1;
    if (!r->speculates() || it.n_tokens != 1 || s.generated() == 0 || room <= 0) continue;
    int offered = std::min(options_.spec.max_tokens, room);
    if (costly) {
      if (adaptive) offered = spec::UsefulGuesses(r->acceptance().rate(), offered);
    } else {
      r->proposer()->Propose(s.tokens, offered, &r->pass());
      offered = static_cast<int>(r->pass().size());
      if (offered == 0) continue;
    }
    guess_items_.push_back(&it);
    candidates_.push_back({r->acceptance().rate(), offered});
  }
  if (guess_items_.empty()) return;
  std::vector<int> k;
  if (adaptive) {
    k = spec::ChooseGuesses(step_cost_, plan.n_tokens, sampling, candidates_);
  } else {
    for (const spec::Candidate& c : candidates_) k.push_back(c.available);
  }
  guess_jobs_.clear();
  for (size_t i = 0; i < guess_items_.size(); ++i) {
    Request* r = by_seq.at(guess_items_[i]->seq);
    if (k[i] > 0)
      r->acceptance().Used();
    else if (adaptive && could_pay &&
             (costly ? DraftRunner::Behind(*r->draft(), guess_items_[i]->seq->tokens) <=
                               DraftRunner::kProbeCatchUp &&
                           draft_probes_.Due()
                     : r->acceptance().Probe()))
      k[i] = 1;
    if (costly && k[i] > 0)
      guess_jobs_.push_back({r->draft(), guess_items_[i]->seq->tokens, k[i], &r->pass()});
  }
  if (costly) draft_runner_->Propose(guess_jobs_);
  const int max_step = model_->backend().max_chunk();
  for (size_t i = 0; i < guess_items_.size(); ++i) {
    Request* r = by_seq.at(guess_items_[i]->seq);
    std::vector<int32_t>& pass = r->pass();
    if (costly && k[i] == 0) pass.clear();
    int n = std::min({k[i], static_cast<int>(pass.size()), max_step - plan.n_tokens});
    if (n > 0) n = scheduler_.AddGuesses(guess_items_[i], n, &plan);
    pass.resize(n);
    pass.insert(pass.begin(), guess_items_[i]->seq->tokens.back());
  }
}

void ServingEngine::Step(std::vector<std::shared_ptr<Request>>& active) {
  const auto now = Clock::now();
  StepPlan plan;
  uint64_t cancelled = 0, preempted = 0;
  {
    std::lock_guard<std::mutex> lock(kv_mu_);
    // Cancellations free their blocks before planning.
    for (auto& r : active) {
      if (!r->cancel_requested() || r->finished()) continue;
      scheduler_.Remove(&r->seq(), /*insert=*/false);
      r->Finish("cancelled", now);
      ++cancelled;
    }
    std::erase_if(active, [](const auto& r) { return r->finished(); });
    // Goal changes reorder the queue at this step (Schedule sorts by policy).
    for (auto& r : active) r->ApplyGoalChange(Ms(origin_, now) / 1000.0);
    plan = scheduler_.Schedule();
    preempted = plan.preempted.size();
  }
  if (plan.empty()) {
    {
      std::lock_guard<std::mutex> lock(kv_mu_);
      std::lock_guard<std::mutex> slock(stats_mu_);
      stats_.requests_cancelled += cancelled;
      RefreshGauges();
    }
    if (!active.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }

  std::unordered_map<const SeqState*, Request*> by_seq;
  for (auto& r : active) by_seq[&r->seq()] = r.get();
  double propose_seconds = 0;
  if (options_.spec.on()) {
    const auto p0 = Clock::now();
    std::lock_guard<std::mutex> lock(kv_mu_);
    AddGuesses(plan, by_seq);
    propose_seconds = std::chrono::duration<double>(Clock::now() - p0).count();
  }

  // Run the batch. When every logits row is a plain greedy draw, the
  // backend picks the tokens where the logits are (one id per row comes
  // back, not a row of logits).
  std::vector<BatchSegment> segments;
  std::vector<int> first_row;  // per item: its first logits row
  int rows = 0;
  // What the step's rows need back: each row's argmax when every sampling
  // row is greedy, else each row's top_k largest logits when every sampler
  // draws from at most that many, else whole rows.
  bool argmax = true, top = true;
  int top_k = 1;
  const int max_top = std::min(Backend::kMaxTopK, model_->config().n_vocab);
  for (const ScheduledItem& it : plan.items) {
    BatchSegment seg;
    seg.tokens = it.guesses > 0 ? by_seq[it.seq]->pass().data() : it.seq->tokens.data() + it.start;
    seg.n_tokens = it.n_tokens;
    seg.pos0 = it.start;
    seg.block_table = it.seq->blocks.data();
    seg.logits_from = LogitsFrom(it);
    first_row.push_back(rows);
    const int item_rows = std::max(0, it.start + it.n_tokens - seg.logits_from);
    rows += item_rows;
    segments.push_back(seg);
    if (item_rows == 0) continue;
    Request& r = *by_seq[it.seq];
    const bool plain = it.sample && item_rows == 1 + it.guesses && it.seq->max_tokens > 0 &&
                       !r.request().logits_processor && r.request().top_logprobs < 0 &&
                       it.seq->generated() + it.guesses >= r.request().sampling.min_tokens;
    const int candidates = r.sampler().top_candidates();
    argmax &= plain && r.sampler().greedy();
    top &= plain && candidates >= 1 && candidates <= max_top;
    top_k = std::max(top_k, candidates);
  }
  top &= !argmax;
  const int n_vocab = model_->config().n_vocab;
  const auto t0 = Clock::now();
  Status forward;
  if (argmax) {
    ids_.resize(static_cast<size_t>(std::max(rows, 1)));
    forward = model_->backend().ForwardArgmax(segments, *kv_, ids_.data());
  } else if (top) {
    ids_.resize(static_cast<size_t>(std::max(rows, 1)) * top_k);
    top_values_.resize(ids_.size());
    forward = model_->backend().ForwardTopK(segments, *kv_, top_k, ids_.data(), top_values_.data());
  } else {
    logits_.resize(static_cast<size_t>(std::max(rows, 1)) * n_vocab);
    forward = model_->backend().Forward(segments, *kv_, logits_.data());
  }
  const auto t1 = Clock::now();
  if (!forward.ok()) {
    FailStep(plan, active, forward, t1, cancelled, preempted);
    return;
  }
  {
    bool latency_only = true;
    for (const ScheduledItem& it : plan.items) latency_only &= it.seq->goal == GoalClass::kLatency;
    latency_budget_.Observe(
        plan.n_tokens, std::chrono::duration<double, std::milli>(t1 - t0).count(), latency_only);
  }

  // Sample, stream, retire.
  int prefill_tokens = 0, decode_tokens = 0;
  uint64_t finished = 0, generated = 0, prompt_tokens = 0, cached_tokens = 0;
  uint64_t spec_proposed = 0, spec_accepted = 0, decode_passes = 0, decode_tokens_out = 0;
  bool decode_only = true;  // every item decodes (the steps speculation's cost model learns from)
  {
    std::lock_guard<std::mutex> lock(kv_mu_);
    scheduler_.Commit(plan);
    for (size_t item = 0; item < plan.items.size(); ++item) {
      const ScheduledItem& it = plan.items[item];
      Request* r = by_seq[it.seq];
      r->MarkScheduled(t0);
      const bool decode = it.start >= it.seq->prompt_len && it.n_tokens == 1 + it.guesses;
      decode_only &= decode;
      if (decode)
        ++decode_tokens;
      else
        prefill_tokens += it.n_tokens;
      // Prompt log-probabilities: the row at position p scores token p + 1.
      int row = first_row[item];
      const int from = LogitsFrom(it);
      int non_finite_at = -1;  // the position of a row of NaN/Inf logits
      for (int p = from; p < it.start + it.n_tokens; ++p, ++row) {
        if (argmax || top) continue;  // no prompt log-probabilities in this step
        if (p + 1 >= it.seq->prompt_len || p + 1 < it.seq->logprobs_from) continue;
        std::span<const float> l(&logits_[static_cast<size_t>(row) * n_vocab], n_vocab);
        const float lp = Logprobs(l, it.seq->tokens[p + 1], 0).logprob;
        // A non-finite logit makes the log-sum non-finite: one check per score.
        if (!std::isfinite(lp) && non_finite_at < 0) non_finite_at = p;
        r->SetPromptLogprob(p + 1, lp);
      }
      if (non_finite_at >= 0) {
        // The request fails (its caller sees finish_reason "error"); its KV
        // is not offered to the prefix cache, since it came from the same
        // broken numbers.
        r->Finish("error", t1, Sampler::NonFiniteError(non_finite_at).message());
        scheduler_.Remove(it.seq, /*insert=*/false);
        ++finished;
        continue;
      }
      if (!it.sample) continue;
      if (it.seq->max_tokens == 0) {  // scoring only
        r->Finish("length", t1);
        scheduler_.Remove(it.seq, /*insert=*/true);
        ++finished;
        continue;
      }
      if (it.seq->generated() == 0) {
        prompt_tokens += it.seq->prompt_len;
        cached_tokens += it.seq->cached_tokens;
      }
      // Row j decides the token after the first j guesses: tokens are drawn
      // row by row while the guesses hold, so a pass yields the kept guesses
      // and one more. Each draw is the one a plain step would make at that
      // position (the request's own random stream), so the output is the
      // same with or without guesses.
      const int first = row - 1 - it.guesses;
      int accepted = 0;
      bool done = false;
      for (int j = 0; j <= it.guesses; ++j) {
        TokenLogprob lp;
        int32_t id = -1;
        if (argmax) {
          id = ids_[static_cast<size_t>(first + j)];  // -1: the row was not finite
        } else if (top) {
          const size_t at = static_cast<size_t>(first + j) * top_k;
          id = ids_[at];  // -1: the row was not finite
          if (id >= 0)
            id = r->sampler().SampleTop(std::span<const float>(&top_values_[at], top_k),
                                        std::span<const int32_t>(&ids_[at], top_k));
        } else {
          std::span<float> logits(&logits_[static_cast<size_t>(first + j) * n_vocab], n_vocab);
          if (Sampler::AllFinite(logits)) id = SampleRow(*r, logits, &lp);
        }
        if (id < 0) {
          r->Finish("error", t1,
                    Sampler::NonFiniteError(it.start + it.n_tokens - 1 - it.guesses + j).message());
          scheduler_.Remove(it.seq, /*insert=*/false);
          done = true;
          break;
        }
        const bool eog = !r->request().sampling.ignore_eos && model_->IsEndOfGeneration(id);
        if (!eog) ++generated;
        if (decode) ++decode_tokens_out;
        if (r->OnToken(id, r->request().top_logprobs >= 0 ? &lp : nullptr, eog, t1)) {
          scheduler_.Confirm(it.seq, accepted);
          scheduler_.Remove(it.seq, /*insert=*/true);
          done = true;
          break;
        }
        if (j == it.guesses || id != r->pass()[j + 1]) break;
        ++accepted;
      }
      if (decode) ++decode_passes;
      if (it.guesses > 0) {
        r->CountGuesses(it.guesses, accepted);
        if (draft_runner_) {
          draft_acceptance_.Observe(it.guesses, accepted);
          draft_probes_.Observe(accepted);
        }
        spec_proposed += it.guesses;
        spec_accepted += accepted;
      }
      if (done) {
        ++finished;
        continue;
      }
      scheduler_.Confirm(it.seq, accepted);
    }
    std::erase_if(active, [](const auto& r) { return r->finished(); });
    // What a decode step of this size costs, sampling included, for the
    // choice of guesses (prefill steps cost less per token, so they would
    // make guesses look cheap).
    if (options_.spec.on() && decode_only)
      step_cost_.Observe(
          plan.n_tokens,
          propose_seconds + std::chrono::duration<double>(Clock::now() - t0).count());
    std::lock_guard<std::mutex> slock(stats_mu_);
    RefreshGauges();
    stats_.requests_finished += finished;
    stats_.requests_cancelled += cancelled;
    stats_.preemptions += preempted;
    stats_.prompt_tokens += prompt_tokens;
    stats_.cached_prompt_tokens += cached_tokens;
    stats_.generated_tokens += generated;
    stats_.steps++;
    stats_.spec_proposed += spec_proposed;
    stats_.spec_accepted += spec_accepted;
    stats_.decode_passes += decode_passes;
    stats_.decode_tokens_out += decode_tokens_out;
    stats_.propose_seconds += propose_seconds;
    stats_.forward_seconds += std::chrono::duration<double>(t1 - t0).count();
    const double secs = std::max(1e-9, std::chrono::duration<double>(t1 - t0).count());
    auto ema = [](double& avg, double x) { avg = avg == 0 ? x : 0.9 * avg + 0.1 * x; };
    if (prefill_tokens > 0 && decode_tokens == 0)
      ema(stats_.prefill_tokens_per_s, prefill_tokens / secs);
    if (decode_tokens > 0 && prefill_tokens == 0)
      ema(stats_.decode_tokens_per_s, decode_tokens / secs);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_count_ = scheduler_.num_waiting();
  }
}

}  // namespace

// The largest pool sized from memory (as braid run's --kv-tokens).
constexpr int kMaxPoolTokens = 4 << 20;

int KvBlocksForMemory(uint64_t available, double fraction, size_t block_bytes, int min_blocks,
                      int max_blocks) {
  const double fit = static_cast<double>(available) * fraction / static_cast<double>(block_bytes);
  const int64_t blocks = static_cast<int64_t>(std::min<double>(fit, max_blocks));
  return static_cast<int>(
      std::clamp<int64_t>(blocks, std::min(min_blocks, max_blocks), max_blocks));
}

Result<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& options) {
  const EngineOptions& o = options;
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
  if (o.evict != "lru" && o.evict != "next-use")
    return Status::InvalidArgument("unknown eviction order '" + o.evict + "' (lru or next-use)");
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
  int blocks = r.kv_blocks > 0 ? r.kv_blocks : (r.kv_tokens + r.block_size - 1) / r.block_size;
  if (r.kv_blocks == 0 && r.kv_tokens == 0) {
    blocks = KvBlocksForMemory(
        available, r.kv_memory_fraction / r.kv_memory_split, backend.KvBlockBytes(r.block_size),
        (model->info().context + r.block_size - 1) / r.block_size, kMaxPoolTokens / r.block_size);
  }
  if (blocks < 1) return Status::InvalidArgument("the KV pool must hold at least one block");
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<KvMemory> kv, backend.AllocateKv(blocks, r.block_size));
  BRAID_RETURN_IF_ERROR(backend.Prepare(*kv, r.max_running));
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<Model> draft, OpenDraftModel(r.spec, r.model, *model));
  // The draft's pool holds as many positions as the target's.
  std::unique_ptr<DraftRunner> runner;
  if (draft) {
    BRAID_ASSIGN_OR_RETURN(runner, DraftRunner::Open(*draft, blocks * r.block_size, r.block_size));
  }
  return std::unique_ptr<Engine>(new ServingEngine(r, std::move(model), std::move(draft),
                                                   std::move(runner), std::move(kv),
                                                   std::move(policy), available));
}

}  // namespace braid
