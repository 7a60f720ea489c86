// A scoring request (GenerationRequest::score_choices): one prompt-only
// request per choice (prompt + choice, log-probabilities from the choice on),
// whose summed log-probabilities make the Completion's choice_logprobs. The
// first choice runs alone so that the others find the prompt in the prefix
// cache.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/engine.h"
#include "request/delta_queue.h"

namespace braid {

class ScoreRequest final : public RequestHandle, public std::enable_shared_from_this<ScoreRequest> {
 public:
  // How a choice's request is submitted (the engine's Submit).
  using SubmitFn =
      std::function<Result<std::shared_ptr<RequestHandle>>(GenerationRequest, DeltaCallback)>;
  ScoreRequest(uint64_t id, GenerationRequest req, DeltaCallback cb, SubmitFn submit);

  // Submits the first choice (the rest follow when it finished). Errors: the
  // submission's.
  Status Start() { return SubmitChoice(0); }

  // ---- RequestHandle (any thread): one delta, the final one ----
  uint64_t id() const override { return id_; }
  std::optional<Delta> Next(int timeout_ms) override { return deltas_.Next(timeout_ms); }
  Completion Wait() override { return deltas_.Wait(); }
  bool finished() const override { return deltas_.finished(); }
  void Cancel() override;
  void SetGoal(GoalClass goal, int priority, std::optional<double> deadline_ms) override;

 private:
  Status SubmitChoice(size_t i);
  // Runs on the engine thread when child i finished.
  void OnChild(size_t i);

  const uint64_t id_;
  GenerationRequest req_;
  SubmitFn submit_;
  DeltaQueue deltas_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // a child's handle was stored
  std::vector<std::shared_ptr<RequestHandle>> children_;
  size_t finished_children_ = 0;
  bool closed_ = false, cancelled_ = false;
  Completion result_;  // guarded by mu_ until handed to deltas_
};

}  // namespace braid
