// One request of the serving engine: the caller-facing handle (deltas,
// result, cancel, goal changes) and the step loop's working state for it
// (its sequence, sampler, text streaming, speculation).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "request/delta_queue.h"
#include "runner/draft_runner.h"
#include "runner/spec_verify.h"
#include "sampling/sampler.h"
#include "sched/sequence.h"
#include "spec/goodput.h"
#include "spec/proposer.h"
#include "tokenizer/tokenizer.h"

namespace braid {

using ServingClock = std::chrono::steady_clock;

// Milliseconds from a to b.
inline double Ms(ServingClock::time_point a, ServingClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// log-softmax of a logit row: the sampled token's logprob and the top k.
TokenLogprob Logprobs(std::span<const float> logits, int32_t id, int k);

class ServingRequest final : public RequestHandle {
 public:
  // `tok` (may be null: no text) decodes the output.
  ServingRequest(uint64_t id, GenerationRequest req, DeltaCallback cb, const Tokenizer* tok);

  // ---- RequestHandle (any thread) ----
  uint64_t id() const override { return id_; }
  std::optional<Delta> Next(int timeout_ms) override { return deltas_.Next(timeout_ms); }
  Completion Wait() override { return deltas_.Wait(); }
  bool finished() const override { return deltas_.finished(); }
  void Cancel() override { cancel_.store(true); }
  void SetGoal(GoalClass goal, int priority, std::optional<double> deadline_ms) override;

  // ---- step loop only ----
  bool cancel_requested() const { return cancel_.load(); }
  // Applies a pending SetGoal to the sequence (`now`: engine clock, seconds).
  bool ApplyGoalChange(double now);
  SeqState& seq() { return seq_; }
  const GenerationRequest& request() const { return req_; }
  Sampler& sampler() { return sampler_; }

  // Speculation: the proposer (null: none), and `group`, the index of
  // sibling outputs this request's output joins when it ends (may be null);
  // or the draft model's state for it.
  void Speculate(std::unique_ptr<spec::Proposer> proposer,
                 std::shared_ptr<spec::SuffixIndex> group);
  void Speculate(std::unique_ptr<DraftRunner::Seq> draft) { draft_ = std::move(draft); }
  bool speculates() const { return proposer_ || draft_; }
  spec::Proposer* proposer() { return proposer_.get(); }
  DraftRunner::Seq* draft() { return draft_.get(); }
  spec::Acceptance& acceptance() { return acceptance_; }
  // This step's tokens when it checks guesses: the last token, then the guesses.
  std::vector<int32_t>& pass() { return pass_; }
  void CountGuesses(int proposed, int accepted);

  // Records a drawn token (`eog`: it ends generation for the model) and
  // streams it. Returns why the output ends with it ("stop", "length"), or
  // null; the caller then calls Finish with that reason.
  const char* OnToken(int32_t id, const TokenLogprob* lp, bool eog, ServingClock::time_point now);

  // Ends the request: flushes held-back text, fills in usage, publishes the
  // Completion and wakes waiters. Called once.
  void Finish(const std::string& reason, ServingClock::time_point now,
              const std::string& error = "");

  // Log-probability of prompt token `pos` (idempotent: recompute after a
  // preemption writes the same slot again).
  void SetPromptLogprob(int pos, float lp);

  void MarkScheduled(ServingClock::time_point now);

 private:
  const uint64_t id_;
  GenerationRequest req_;
  DeltaQueue deltas_;
  SeqState seq_;
  Sampler sampler_;
  std::unique_ptr<StreamDecoder> decoder_;
  OutputStops stops_;
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
  std::mutex goal_mu_;
  std::optional<GoalChange> goal_change_;  // guarded by goal_mu_
  ServingClock::time_point submitted_, last_token_;
  bool first_token_ = false, scheduled_ = false;
  Completion result_;  // step loop only, until Finish hands it to deltas_
};

}  // namespace braid
