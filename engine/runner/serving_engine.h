// The serving engine: a step loop on its own thread that admits requests
// and runs steps in phases, in the manner of vLLM v1's
// schedule -> execute -> update:
//   1. plan     (serving_step.cpp: Plan) cancellations, goal changes, then
//               the scheduler's StepPlan (sched/scheduler.h), plain data;
//   2. guess    (serving_step.cpp: AddGuesses) speculation adds guesses to
//               the plan's decodes where they pay (spec/goodput.h);
//      (tier_io.h: with a host KV tier, the copies out of evicted blocks
//      and back into the plan's loads are asked for here)
//   3. assemble (step_batch.h: StepBatch::Assemble) the plan as segments of
//               one ragged batch, and what its rows bring back;
//   4. forward  (step_batch.h: StepBatch::Forward) the backend's pass;
//   5. sample and verify (step_batch.h: StepBatch::Draw, spec_verify.h:
//               VerifyGuesses) each row's token, guesses kept while they hold;
//   6. retire   (step_retire.cpp) tokens streamed to their requests
//               (serving_request.h), finished requests retired from the
//               scheduler (their KV offered to the prefix cache), the
//               step's figures recorded.
// Engine::Open (serving_engine.cpp) builds it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "kv/block_pool.h"
#include "kv/radix_cache.h"
#include "runner/backend_model.h"
#include "runner/draft_runner.h"
#include "runner/serving_request.h"
#include "runner/step_batch.h"
#include "runner/tier_io.h"
#include "sched/latency_budget.h"
#include "sched/policy.h"
#include "sched/scheduler.h"
#include "sched/step_budget.h"
#include "spec/goodput.h"
#include "spec/proposer.h"

namespace braid {

class ServingEngine final : public Engine {
 public:
  // `kv` (from model's backend) holds the pool's blocks; `options` has the
  // backend's defaults filled in (Engine::Open).
  ServingEngine(const EngineOptions& options, std::unique_ptr<BackendModel> model,
                std::unique_ptr<Model> draft, std::unique_ptr<DraftRunner> draft_runner,
                std::unique_ptr<KvMemory> kv, std::unique_ptr<AdmissionPolicy> policy,
                uint64_t kv_memory_available);
  ~ServingEngine() override { Shutdown(); }
  // Opens the lower KV tier of `bytes` (EngineOptions::kv_host_bytes, resolved).
  Status OpenTier(uint64_t bytes);

  // ---- Engine (any thread) ----
  Result<std::shared_ptr<RequestHandle>> Submit(GenerationRequest r, DeltaCallback cb) override;
  int ProbePrefix(const std::vector<int32_t>& tokens, uint64_t salt) override;
  int Prefetch(const std::vector<int32_t>& tokens, uint64_t salt) override;
  uint64_t Pin(const std::vector<int32_t>& tokens, uint64_t salt) override;
  void Unpin(uint64_t pin) override;
  uint64_t ExpectUse(const std::vector<int32_t>& tokens, uint64_t salt, double in_ms,
                     bool hold) override;
  void ForgetUse(uint64_t id) override;
  EngineStats stats() const override;
  Model* model() override { return model_.get(); }
  void Shutdown() override;

 private:
  using Active = std::vector<std::shared_ptr<ServingRequest>>;  // admitted, not finished

  // What a step did, for stats_ (RecordStep).
  struct StepTally {
    int prefill_tokens = 0, decode_tokens = 0;
    uint64_t decode_context = 0;  // positions the decodes attend (their sequences' lengths)
    uint64_t finished = 0, cancelled = 0, preempted = 0, generated = 0;
    uint64_t prompt_tokens = 0, cached_tokens = 0, host_tokens = 0;
    uint64_t spec_proposed = 0, spec_accepted = 0, decode_passes = 0, decode_tokens_out = 0;
    bool decode_only = true;  // every item decodes (the steps speculation's cost model learns from)
  };

  Status ValidateRequest(const GenerationRequest& r) const;
  Result<std::shared_ptr<RequestHandle>> SubmitScoring(GenerationRequest r, DeltaCallback cb);

  // ---- the step loop (serving_engine.cpp) ----
  void Loop();
  // Hands fresh requests to the scheduler (or finishes those with nothing
  // to compute).
  void Admit(std::vector<std::shared_ptr<ServingRequest>>& fresh, Active& active);
  // Sets up a fresh request's sequence and speculation.
  void Prepare(ServingRequest& r);

  // ---- one step (serving_step.cpp) ----
  void Step(Active& active);
  // Phase 1: cancellations free their blocks, goal changes apply, then the
  // scheduler's plan.
  StepPlan Plan(Active& active, ServingClock::time_point now, StepTally* tally);
  // Phase 2: decodes of the plan get their requests' guesses, as many as pay
  // at this step's size (spec/goodput.h).
  void AddGuesses(StepPlan& plan, const RequestsBySeq& by_seq);
  // The decodes that may guess into guess_items_, with what each offers
  // into candidates_ (model-free guesses are made here).
  void CollectCandidates(StepPlan& plan, const RequestsBySeq& by_seq);
  // How many guesses each of guess_items_ checks (a probe of one where none
  // pays but acceptance is to be measured); fills guess_jobs_ for a draft.
  std::vector<int> ChooseGuesses(const StepPlan& plan, int sampling, bool could_pay,
                                 const RequestsBySeq& by_seq);

  // ---- retiring a step (step_retire.cpp) ----
  // Phases 5 and 6 after a forward pass that ran from t0 to t1.
  void Retire(const StepPlan& plan, const RequestsBySeq& by_seq, Active& active,
              ServingClock::time_point t0, ServingClock::time_point t1, double propose_seconds,
              StepTally& tally);
  // One plan item: prompt log-probabilities, then its tokens drawn and
  // verified, streamed, and the sequence confirmed or retired.
  void RetireItem(const ScheduledItem& it, int row, ServingRequest& r, ServingClock::time_point t1,
                  StepTally& tally);
  // Prompt log-probabilities of the item's rows (whole logits rows only);
  // returns the position of a row of non-finite logits, else -1.
  int ScorePrompt(const ScheduledItem& it, int row, ServingRequest& r);
  // Draws and verifies the item's sampling rows (spec_verify.h) from `first`.
  void SampleItem(const ScheduledItem& it, int first, bool decode, ServingRequest& r,
                  ServingClock::time_point t1, StepTally& tally);
  // A step whose forward pass failed: every request in it finishes with the
  // error (their KV, from the same pass, is not offered to the prefix cache).
  void FailStep(const StepPlan& plan, Active& active, const Status& error,
                ServingClock::time_point now, const StepTally& tally);
  // Adds a step's tally to stats_ (holding kv_mu_ and stats_mu_); `forward`:
  // the pass's seconds.
  void RecordStep(const StepTally& tally, double forward_seconds, double propose_seconds);
  // Copies the queue and pool gauges into stats_ (holding kv_mu_ and stats_mu_).
  void RefreshGauges();
  // The scheduler's waiting count for Submit's queue limit.
  void PublishWaiting();

  EngineOptions options_;
  std::unique_ptr<BackendModel> model_;
  std::unique_ptr<Model> draft_;  // the draft model (null unless spec draft)
  std::unique_ptr<DraftRunner> draft_runner_;
  // Every draft request's acceptance together (step loop only): a new
  // request's starting point. It starts low, as a draft costs passes to
  // find out that it is wrong.
  spec::Acceptance draft_acceptance_{spec::kCostlyPrior};
  spec::ProbeSchedule draft_probes_;  // step loop only
  std::unique_ptr<KvMemory> kv_;      // the blocks' numbers; pool_ and cache_ say whose they are
  std::unique_ptr<AdmissionPolicy> policy_;
  kv::BlockPool pool_;
  kv::RadixCache cache_;
  Scheduler scheduler_;
  std::unique_ptr<TierIo> tier_io_;     // the lower KV tier (null: none), under kv_mu_
  LatencyBudget latency_budget_;        // step loop only
  StepBudget step_budget_;              // step loop only; read by scheduler_ with step_ms
  spec::StepCost step_cost_;            // step loop only
  const std::vector<int32_t> eog_ids_;  // masked before a request's min_tokens
  spec::SuffixStore suffix_store_;
  // AddGuesses' scratch: the items that may guess, their candidates, and
  // the draft model's jobs.
  std::vector<ScheduledItem*> guess_items_;
  std::vector<spec::Candidate> candidates_;
  std::vector<DraftRunner::Job> guess_jobs_;
  StepBatch batch_;           // step loop only
  mutable std::mutex kv_mu_;  // pool, cache and scheduler: the loop holds it during planning

  std::mutex mu_;  // inbox and stop flag
  std::condition_variable cv_;
  std::vector<std::shared_ptr<ServingRequest>> inbox_;
  int waiting_count_ = 0;
  bool stopping_ = false;
  uint64_t next_id_ = 0;

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  const ServingClock::time_point origin_ = ServingClock::now();  // the engine clock's zero
  std::thread loop_;
};

}  // namespace braid
