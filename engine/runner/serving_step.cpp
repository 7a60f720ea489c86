// One step of the serving engine: plan, guesses, the batch's forward pass;
// then step_retire.cpp. serving_engine.h lists the phases.
#include <algorithm>
#include <chrono>
#include <thread>

#include "runner/serving_engine.h"

namespace braid {

void ServingEngine::Step(Active& active) {
  const auto now = ServingClock::now();
  StepTally tally;
  StepPlan plan = Plan(active, now, &tally);
  RequestsBySeq by_seq;
  for (auto& r : active) by_seq[&r->seq()] = r.get();
  double propose_seconds = 0;
  if (!plan.empty() && options_.spec.on()) {
    const auto p0 = ServingClock::now();
    std::lock_guard<std::mutex> lock(kv_mu_);
    AddGuesses(plan, by_seq);
    propose_seconds = std::chrono::duration<double>(ServingClock::now() - p0).count();
  }
  if (tier_io_) {
    // The tier's copies before the pass; a failed load sends its sequence
    // back to waiting and out of the plan. With nothing to run, prefetches
    // still join the cache (they hold free blocks until then).
    std::lock_guard<std::mutex> lock(kv_mu_);
    tier_io_->Flush(plan, scheduler_);
    tally.preempted = plan.preempted.size();
  }
  if (plan.empty()) {
    {
      std::lock_guard<std::mutex> lock(kv_mu_);
      std::lock_guard<std::mutex> slock(stats_mu_);
      stats_.requests_cancelled += tally.cancelled;
      RefreshGauges();
    }
    if (!active.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  batch_.Assemble(plan, by_seq);
  const auto t0 = ServingClock::now();
  const Status forward = batch_.Forward(model_->backend(), *kv_);
  const auto t1 = ServingClock::now();
  if (!forward.ok()) {
    FailStep(plan, active, forward, t1, tally);
    return;
  }
  bool latency_only = true;
  for (const ScheduledItem& it : plan.items) latency_only &= it.seq->goal == GoalClass::kLatency;
  latency_budget_.Observe(plan.n_tokens, Ms(t0, t1), latency_only);
  if (options_.step_ms > 0) step_budget_.Observe(plan.n_tokens, Ms(t0, t1));
  Retire(plan, by_seq, active, t0, t1, propose_seconds, tally);
}

StepPlan ServingEngine::Plan(Active& active, ServingClock::time_point now, StepTally* tally) {
  std::lock_guard<std::mutex> lock(kv_mu_);
  // Cancellations free their blocks before planning.
  for (auto& r : active) {
    if (!r->cancel_requested() || r->finished()) continue;
    scheduler_.Remove(&r->seq(), /*insert=*/false);
    r->Finish("cancelled", now);
    ++tally->cancelled;
  }
  std::erase_if(active, [](const auto& r) { return r->finished(); });
  // Goal changes reorder the queue at this step (Schedule sorts by policy).
  for (auto& r : active) r->ApplyGoalChange(Ms(origin_, now) / 1000.0);
  if (tier_io_) tier_io_->AskPrefetches();
  StepPlan plan = scheduler_.Schedule();
  tally->preempted = plan.preempted.size();
  return plan;
}

void ServingEngine::AddGuesses(StepPlan& plan, const RequestsBySeq& by_seq) {
  int sampling = 0;
  for (const ScheduledItem& it : plan.items) sampling += it.sample;
  // Acceptance is probed only where a guess could pay at all.
  const bool could_pay =
      !options_.spec.adaptive || spec::GuessCouldPay(step_cost_, plan.n_tokens, sampling);
  // A draft model's guesses cost passes of their own: how many each sequence
  // checks is chosen first, and only those are made. Model-free guesses are
  // made first, and the choice is among what they offer.
  const bool costly = draft_runner_ != nullptr;
  if (costly && !could_pay) return;
  CollectCandidates(plan, by_seq);
  if (guess_items_.empty()) return;
  const std::vector<int> k = ChooseGuesses(plan, sampling, could_pay, by_seq);
  if (costly) draft_runner_->Propose(guess_jobs_);
  const int max_step = model_->backend().max_chunk();
  for (size_t i = 0; i < guess_items_.size(); ++i) {
    ServingRequest* r = by_seq.at(guess_items_[i]->seq);
    std::vector<int32_t>& pass = r->pass();
    if (costly && k[i] == 0) pass.clear();
    int n = std::min({k[i], static_cast<int>(pass.size()), max_step - plan.n_tokens});
    if (n > 0) n = scheduler_.AddGuesses(guess_items_[i], n, &plan);
    pass.resize(n);
    pass.insert(pass.begin(), guess_items_[i]->seq->tokens.back());
  }
}

void ServingEngine::CollectCandidates(StepPlan& plan, const RequestsBySeq& by_seq) {
  const bool costly = draft_runner_ != nullptr;
  guess_items_.clear();
  candidates_.clear();
  for (ScheduledItem& it : plan.items) {
    if (!it.sample) continue;
    const SeqState& s = *it.seq;
    ServingRequest* r = by_seq.at(it.seq);
    // Decodes only; a guess must leave room for the token after it.
    const int room = s.max_tokens - s.generated() - 1;
    if (!r->speculates() || it.n_tokens != 1 || s.generated() == 0 || room <= 0) continue;
    int offered = std::min(options_.spec.max_tokens, room);
    if (costly) {
      if (options_.spec.adaptive) offered = spec::UsefulGuesses(r->acceptance().rate(), offered);
    } else {
      r->proposer()->Propose(s.tokens, offered, &r->pass());
      offered = static_cast<int>(r->pass().size());
      if (offered == 0) continue;
    }
    guess_items_.push_back(&it);
    candidates_.push_back({r->acceptance().rate(), offered});
  }
}

std::vector<int> ServingEngine::ChooseGuesses(const StepPlan& plan, int sampling, bool could_pay,
                                              const RequestsBySeq& by_seq) {
  const bool adaptive = options_.spec.adaptive;
  const bool costly = draft_runner_ != nullptr;
  std::vector<int> k;
  if (adaptive) {
    k = spec::ChooseGuesses(step_cost_, plan.n_tokens, sampling, candidates_);
  } else {
    for (const spec::Candidate& c : candidates_) k.push_back(c.available);
  }
  guess_jobs_.clear();
  for (size_t i = 0; i < guess_items_.size(); ++i) {
    ServingRequest* r = by_seq.at(guess_items_[i]->seq);
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
  return k;
}

}  // namespace braid
