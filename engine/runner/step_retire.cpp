// The end of a serving step: each item's prompt log-probabilities, its
// tokens drawn and verified against its guesses (spec_verify.h) and streamed
// to its request, finished requests retired from the scheduler, and the
// step's figures.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>

#include "runner/serving_engine.h"
#include "runner/spec_verify.h"

namespace braid {

void ServingEngine::Retire(const StepPlan& plan, const RequestsBySeq& by_seq, Active& active,
                           ServingClock::time_point t0, ServingClock::time_point t1,
                           double propose_seconds, StepTally& tally) {
  {
    std::lock_guard<std::mutex> lock(kv_mu_);
    scheduler_.Commit(plan);
    for (size_t item = 0; item < plan.items.size(); ++item) {
      const ScheduledItem& it = plan.items[item];
      ServingRequest& r = *by_seq.at(it.seq);
      r.MarkScheduled(t0);
      RetireItem(it, batch_.first_row(item), r, t1, tally);
    }
    std::erase_if(active, [](const auto& r) { return r->finished(); });
    // What a decode step of this size costs, sampling included, for the
    // choice of guesses (prefill steps cost less per token, so they would
    // make guesses look cheap).
    if (options_.spec.on() && tally.decode_only)
      step_cost_.Observe(
          plan.n_tokens,
          propose_seconds + std::chrono::duration<double>(ServingClock::now() - t0).count());
    std::lock_guard<std::mutex> slock(stats_mu_);
    RecordStep(tally, std::chrono::duration<double>(t1 - t0).count(), propose_seconds);
  }
  PublishWaiting();
}

void ServingEngine::RetireItem(const ScheduledItem& it, int row, ServingRequest& r,
                               ServingClock::time_point t1, StepTally& tally) {
  const bool decode = it.start >= it.seq->prompt_len && it.n_tokens == 1 + it.guesses;
  tally.decode_only &= decode;
  if (decode) {
    ++tally.decode_tokens;
    tally.decode_context += static_cast<uint64_t>(it.start + it.n_tokens);
  } else {
    tally.prefill_tokens += it.n_tokens;
  }
  const int non_finite_at = ScorePrompt(it, row, r);
  if (non_finite_at >= 0) {
    // The request fails (its caller sees finish_reason "error"); its KV is
    // not offered to the prefix cache, since it came from the same broken
    // numbers.
    r.Finish("error", t1, Sampler::NonFiniteError(non_finite_at).message());
    scheduler_.Remove(it.seq, /*insert=*/false);
    ++tally.finished;
    return;
  }
  if (!it.sample) return;
  if (it.seq->max_tokens == 0) {  // scoring only
    r.Finish("length", t1);
    scheduler_.Remove(it.seq, /*insert=*/true);
    ++tally.finished;
    return;
  }
  if (it.seq->generated() == 0) {
    tally.prompt_tokens += it.seq->prompt_len;
    tally.cached_tokens += it.seq->cached_tokens;
    tally.host_tokens += it.seq->host_tokens;
  }
  // The sampling rows are the item's last 1 + guesses.
  const int end_row = row + std::max(0, it.start + it.n_tokens - StepBatch::LogitsFrom(it));
  SampleItem(it, end_row - 1 - it.guesses, decode, r, t1, tally);
}

int ServingEngine::ScorePrompt(const ScheduledItem& it, int row, ServingRequest& r) {
  // Only whole logits rows give prompt log-probabilities; a step that asks
  // for them has them (StepBatch: no argmax or top-k then).
  if (batch_.output() != StepBatch::Output::kLogits) return -1;
  int non_finite_at = -1;  // the position of a row of NaN/Inf logits
  // The row at position p scores token p + 1.
  for (int p = StepBatch::LogitsFrom(it); p < it.start + it.n_tokens; ++p, ++row) {
    if (p + 1 >= it.seq->prompt_len || p + 1 < it.seq->logprobs_from) continue;
    const float lp = Logprobs(batch_.logits(row), it.seq->tokens[p + 1], 0).logprob;
    // A non-finite logit makes the log-sum non-finite: one check per score.
    if (!std::isfinite(lp) && non_finite_at < 0) non_finite_at = p;
    r.SetPromptLogprob(p + 1, lp);
  }
  return non_finite_at;
}

void ServingEngine::SampleItem(const ScheduledItem& it, int first, bool decode, ServingRequest& r,
                               ServingClock::time_point t1, StepTally& tally) {
  TokenLogprob lp;
  const char* end = nullptr;  // why the output ended, once it did
  auto draw = [&](int j) {
    lp = TokenLogprob();
    return batch_.Draw(first + j, r, &lp);
  };
  auto take = [&](int32_t id) {
    const bool eog = !r.request().sampling.ignore_eos && model_->IsEndOfGeneration(id);
    if (!eog) ++tally.generated;
    if (decode) ++tally.decode_tokens_out;
    end = r.OnToken(id, r.request().top_logprobs >= 0 ? &lp : nullptr, eog, t1);
    return end != nullptr;
  };
  std::span<const int32_t> guesses;
  if (it.guesses > 0) guesses = std::span<const int32_t>(r.pass()).subspan(1, it.guesses);
  const Verdict v = VerifyGuesses(guesses, draw, take);
  if (decode) ++tally.decode_passes;
  if (it.guesses > 0) {
    r.CountGuesses(it.guesses, v.accepted);
    if (draft_runner_) {
      draft_acceptance_.Observe(it.guesses, v.accepted);
      draft_probes_.Observe(v.accepted);
    }
    tally.spec_proposed += it.guesses;
    tally.spec_accepted += v.accepted;
  }
  if (v.bad_row >= 0) {
    const int pos = it.start + it.n_tokens - 1 - it.guesses + v.bad_row;
    r.Finish("error", t1, Sampler::NonFiniteError(pos).message());
    scheduler_.Remove(it.seq, /*insert=*/false);
    ++tally.finished;
    return;
  }
  if (v.ended) {
    r.Finish(end, t1);
    scheduler_.Confirm(it.seq, v.accepted);
    scheduler_.Remove(it.seq, /*insert=*/true);
    ++tally.finished;
    return;
  }
  scheduler_.Confirm(it.seq, v.accepted);
}

void ServingEngine::FailStep(const StepPlan& plan, Active& active, const Status& error,
                             ServingClock::time_point now, const StepTally& tally) {
  RequestsBySeq by_seq;
  for (auto& r : active) by_seq[&r->seq()] = r.get();
  uint64_t finished = 0;
  {
    std::lock_guard<std::mutex> lock(kv_mu_);
    for (const ScheduledItem& it : plan.items) {
      ServingRequest* r = by_seq[it.seq];
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
    stats_.requests_cancelled += tally.cancelled;
    stats_.preemptions += tally.preempted;
  }
  PublishWaiting();
}

void ServingEngine::RecordStep(const StepTally& t, double forward_seconds, double propose_seconds) {
  RefreshGauges();
  stats_.requests_finished += t.finished;
  stats_.requests_cancelled += t.cancelled;
  stats_.preemptions += t.preempted;
  stats_.prompt_tokens += t.prompt_tokens;
  stats_.cached_prompt_tokens += t.cached_tokens;
  stats_.host_prompt_tokens += t.host_tokens;
  stats_.generated_tokens += t.generated;
  stats_.steps++;
  stats_.spec_proposed += t.spec_proposed;
  stats_.spec_accepted += t.spec_accepted;
  stats_.decode_passes += t.decode_passes;
  stats_.decode_tokens_out += t.decode_tokens_out;
  stats_.propose_seconds += propose_seconds;
  stats_.forward_seconds += forward_seconds;
  if (t.prefill_tokens == 0 && t.decode_tokens > 0) {
    stats_.decode_steps++;
    stats_.decode_step_tokens += t.generated;
    stats_.decode_step_context_tokens += t.decode_context;
    stats_.decode_step_seconds += forward_seconds;
  }
  const double secs = std::max(1e-9, forward_seconds);
  auto ema = [](double& avg, double x) { avg = avg == 0 ? x : 0.9 * avg + 0.1 * x; };
  if (t.prefill_tokens > 0 && t.decode_tokens == 0)
    ema(stats_.prefill_tokens_per_s, t.prefill_tokens / secs);
  if (t.decode_tokens > 0 && t.prefill_tokens == 0)
    ema(stats_.decode_tokens_per_s, t.decode_tokens / secs);
}

void ServingEngine::RefreshGauges() {
  stats_.running = scheduler_.num_running();
  stats_.waiting = scheduler_.num_waiting();
  stats_.kv_blocks_total = pool_.num_blocks();
  stats_.kv_slides_total = pool_.num_slides();
  stats_.kv_slides_taken_back = pool_.slides_taken_back();
  stats_.kv_pool_bytes = kv_->bytes();
  stats_.kv_blocks_free = pool_.num_free();
  stats_.kv_blocks_cached = cache_.stats().cached_blocks;
}

void ServingEngine::PublishWaiting() {
  const int waiting = scheduler_.num_waiting();
  std::lock_guard<std::mutex> lock(mu_);
  waiting_count_ = waiting;
}

}  // namespace braid
