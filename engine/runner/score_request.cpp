#include "runner/score_request.h"

#include <algorithm>
#include <string>

namespace braid {

ScoreRequest::ScoreRequest(uint64_t id, GenerationRequest req, DeltaCallback cb, SubmitFn submit)
    : id_(id), req_(std::move(req)), submit_(std::move(submit)), deltas_(std::move(cb)) {
  result_.choice_logprobs.assign(req_.score_choices.size(), 0.0f);
  result_.usage.prompt_tokens = static_cast<int>(req_.prompt.size());
}

void ScoreRequest::Cancel() {
  std::vector<std::shared_ptr<RequestHandle>> children;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    children = children_;
  }
  for (auto& c : children) c->Cancel();
}

void ScoreRequest::SetGoal(GoalClass goal, int priority, std::optional<double> deadline_ms) {
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

Status ScoreRequest::SubmitChoice(size_t i) {
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

void ScoreRequest::OnChild(size_t i) {
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
  Completion result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    result_.finish_reason = cancelled_ ? "cancelled" : !result_.error.empty() ? "error" : "stop";
    closed_ = true;
    children_.clear();
    d.finish_reason = result_.finish_reason;
    d.error = result_.error;
    result = result_;
  }
  deltas_.Finish(std::move(d), std::move(result));
}

}  // namespace braid
