#include "runner/serving_request.h"

#include <algorithm>
#include <cmath>

namespace braid {

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

ServingRequest::ServingRequest(uint64_t id, GenerationRequest req, DeltaCallback cb,
                               const Tokenizer* tok)
    : id_(id),
      req_(std::move(req)),
      deltas_(std::move(cb)),
      sampler_(req_.sampling),
      stops_(req_.sampling) {
  if (tok) decoder_ = std::make_unique<StreamDecoder>(*tok);
  submitted_ = ServingClock::now();
}

void ServingRequest::SetGoal(GoalClass goal, int priority, std::optional<double> deadline_ms) {
  std::lock_guard<std::mutex> lock(goal_mu_);
  goal_change_ = GoalChange{goal, priority, deadline_ms};
}

bool ServingRequest::ApplyGoalChange(double now) {
  std::optional<GoalChange> g;
  {
    std::lock_guard<std::mutex> lock(goal_mu_);
    g.swap(goal_change_);
  }
  if (!g) return false;
  seq_.goal = g->goal;
  seq_.priority = g->priority;
  if (g->deadline_ms) seq_.deadline = now + *g->deadline_ms / 1000.0;
  return true;
}

void ServingRequest::Speculate(std::unique_ptr<spec::Proposer> proposer,
                               std::shared_ptr<spec::SuffixIndex> group) {
  proposer_ = std::move(proposer);
  group_ = std::move(group);
}

void ServingRequest::CountGuesses(int proposed, int accepted) {
  result_.spec_proposed += proposed;
  result_.spec_accepted += accepted;
  acceptance_.Observe(proposed, accepted);
}

const char* ServingRequest::OnToken(int32_t id, const TokenLogprob* lp, bool eog,
                                    ServingClock::time_point now) {
  if (!first_token_) {
    first_token_ = true;
    result_.timings.ttft_ms = Ms(submitted_, now);
  } else {
    result_.timings.inter_token_ms.push_back(Ms(last_token_, now));
  }
  last_token_ = now;
  if (stops_.EndsBefore(id, eog)) return "stop";
  Delta d;
  seq_.tokens.push_back(id);
  result_.tokens.push_back(id);
  d.tokens.push_back(id);
  if (lp) {
    d.logprobs.push_back(*lp);
    result_.logprobs.push_back(*lp);
  }
  std::string piece;
  if (decoder_) piece = decoder_->Push(id);
  const OutputStops::End end =
      stops_.Joined(seq_.generated(), decoder_ ? &piece : nullptr, &d.text);
  result_.text += d.text;
  deltas_.Push(std::move(d));
  if (end == OutputStops::End::kStopString) return "stop";
  if (end == OutputStops::End::kLength) return "length";
  return nullptr;
}

void ServingRequest::Finish(const std::string& reason, ServingClock::time_point now,
                            const std::string& error) {
  Delta d;
  if (decoder_ && !stops_.stopped_by_string() && reason != "cancelled" && reason != "error") {
    std::string held;
    d.text = stops_.Flush(decoder_->Flush(), &held);
    d.text += held;
    result_.text += d.text;
  }
  d.finish_reason = reason;
  d.error = error;
  result_.finish_reason = reason;
  result_.error = error;
  result_.usage.prompt_tokens = seq_.prompt_len;
  result_.usage.cached_tokens = seq_.cached_tokens;
  result_.usage.host_tokens = seq_.host_tokens;
  result_.usage.generated_tokens = static_cast<int>(result_.tokens.size());
  result_.timings.total_ms = Ms(submitted_, now);
  result_.preemptions = seq_.preemptions;
  // A finished output is what the siblings' guesses come from.
  if (group_ && (reason == "stop" || reason == "length") && !result_.tokens.empty())
    group_->Add(result_.tokens);
  if (!scheduled_) result_.timings.queue_ms = result_.timings.total_ms;
  draft_.reset();  // its draft KV blocks go back now
  deltas_.Finish(std::move(d), std::move(result_));
}

void ServingRequest::SetPromptLogprob(int pos, float lp) {
  const int from = req_.prompt_logprobs_from;
  result_.prompt_logprobs.resize(req_.prompt.size() - from);
  result_.prompt_logprobs[pos - from] = lp;
}

void ServingRequest::MarkScheduled(ServingClock::time_point now) {
  if (scheduled_) return;
  scheduled_ = true;
  result_.timings.queue_ms = Ms(submitted_, now);
}

}  // namespace braid
