#include "exec/executor.h"

#include <algorithm>

#include "exec/dispatch_order.h"
#include "exec/output_request.h"
#include "exec/prefix_groups.h"
#include "exec/regex_dfa.h"
#include "exec/stored_scores.h"
#include "store/run_store.h"

namespace braid::rt {
namespace {

constexpr size_t kShareMinTokens = 16;  // one KV block
constexpr size_t kShareWorthTokens = 64;
// A node whose engine failed and is no longer alive moves to another engine
// at most this many times.
constexpr int kMaxMoves = 2;
// A request every engine refused as full is sent again after this long.
constexpr auto kFullRetry = std::chrono::milliseconds(20);

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Half of a client's round trip of `rtt_ms` (the way out, or back).
Clock::duration HalfTrip(int rtt_ms) { return std::chrono::microseconds(rtt_ms * 500); }

GoalClass GoalOf(const DagNode& n) {
  return n.goal == Criteria::kLatency ? GoalClass::kLatency : GoalClass::kThroughput;
}

}  // namespace

Executor::Executor(ExecutedRun run)
    : ctx_(std::move(run.ctx)),
      id_(std::move(run.id)),
      options_(*run.options),
      resumed_(run.resumed),
      t0_(run.t0),
      dag_(*run.dag),
      changed_(*run.changed),
      events_(std::move(run.events)),
      kept_(ctx_.get(), options_.mode == Mode::kDag,
            options_.program_hash.empty() ? options_.program : options_.program_hash) {
  inbox_->wake = ctx_->wake;
}

void Executor::Notify() {
  changed_.notify_all();
  ctx_->wake->Raise();
}

bool Executor::Idle() const {
  bool delayed = false;
  for (const auto& [id, ex] : progress_)
    delayed |= ex.done_at.has_value() || ex.send_at.has_value();
  return flights_.empty() && !delayed;
}

LiveFigures Executor::Live(NodeId n) const {
  LiveFigures live;
  for (const auto& [fid, f] : flights_)
    if (f.node == n) live.generated_tokens += f.live_tokens->load(std::memory_order_relaxed);
  if (auto e = progress_.find(n); e != progress_.end() && e->second.submitted_once)
    live.run_ms = MsBetween(e->second.started, Clock::now());
  return live;
}

void Executor::Cancel() {
  for (auto& [id, f] : flights_) {
    f.handle->Cancel();
    --*ctx_->engine(f.engine).in_flight;
    for (const KeptHold& h : f.holds) kept_.Release(h);
  }
  kept_.Drop();
  flights_.clear();
  for (auto& [id, s] : shares_) engine(s.engine)->Unpin(s.pin);
  shares_.clear();
  for (size_t i = 1; i <= dag_.num_nodes(); ++i)
    if (!dag_.node(i).Finished()) Fail(i, "cancelled", /*cancelled=*/true);
  progress_.clear();
}

void Executor::End() { kept_.Drop(); }

std::optional<Clock::time_point> Executor::Pump() {
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    events.swap(inbox_->events);
  }
  for (const Event& ev : events) HandleEvent(ev);
  const Clock::time_point now = Clock::now();
  FireRoundTrips(now);
  Schedule(now);
  return NextWake(now);
}

// Baseline round trips that are due: requests sent, outputs delivered.
void Executor::FireRoundTrips(Clock::time_point now) {
  std::vector<NodeId> sends, dones;
  for (auto& [id, ex] : progress_) {
    if (ex.send_at && *ex.send_at <= now) sends.push_back(id);
    if (ex.done_at && *ex.done_at <= now) dones.push_back(id);
  }
  for (NodeId n : sends) {
    progress_[n].send_at.reset();
    SubmitOrFail(n, -1);
  }
  for (NodeId n : dones) {
    progress_[n].done_at.reset();
    CompleteNode(n);
  }
}

std::optional<Clock::time_point> Executor::NextWake(Clock::time_point now) {
  std::optional<Clock::time_point> next;
  for (const auto& [id, ex] : progress_)
    for (const auto& t : {ex.send_at, ex.done_at})
      if (t && (!next || *t < *next)) next = *t;
  kept_.Expire(now, &next);
  return next;
}

// ---- events from the engines ------------------------------------------------

void Executor::HandleEvent(const Event& ev) {
  auto it = flights_.find(ev.flight);
  if (it == flights_.end()) return;  // cancelled meanwhile
  if (!it->second.admitted) OnAdmitted(ev.flight);
  if (!ev.finished) return;
  it = flights_.find(ev.flight);
  Flight f = std::move(it->second);
  flights_.erase(it);
  --*ctx_->engine(f.engine).in_flight;
  const Completion c = f.handle->Wait();
  if (MoveFromDeadEngine(f.node, f.engine, c)) return;
  OnSegmentDone(f.node, c);
}

// A request that failed because its engine went away (the engine reports
// itself not alive) is sent again elsewhere: the segment starts over, the
// outputs already generated are kept.
bool Executor::MoveFromDeadEngine(NodeId n, int engine, const Completion& c) {
  if (c.finish_reason != "error") return false;
  const PlacementEngine& slot = ctx_->engine(engine);
  if (slot.engine->alive()) return false;
  DagNode& node = dag_.node(n);
  auto it = progress_.find(n);
  if (node.Finished() || it == progress_.end() || it->second.moves >= kMaxMoves) return false;
  ++it->second.moves;
  node.prompt_tokens += c.usage.prompt_tokens;
  node.cached_tokens += c.usage.cached_tokens;
  node.host_tokens += c.usage.host_tokens;
  node.generated_tokens += c.usage.generated_tokens;
  const std::string why = slot.name + " is not alive after: " + c.error;
  events_->Node("node_moved", node, why);
  Status s = Submit(n, -1, nullptr);
  if (!s.ok()) Fail(n, why + "; moving it elsewhere failed: " + s.message());
  return true;
}

// The request's first token arrived (or it ended): its prompt is in the
// engine's prefix cache. A leader releases its followers onto the same
// engine, with the shared prefix pinned until the last of them is admitted.
void Executor::OnAdmitted(uint64_t flight_id) {
  Flight& f = flights_.at(flight_id);
  f.admitted = true;
  for (const KeptHold& h : f.holds) kept_.Release(h);
  f.holds.clear();
  if (DagNode& node = dag_.node(f.node); node.first_token_ms < 0) node.first_token_ms = NowMs();
  if (f.share) {
    auto s = shares_.find(f.share);
    if (s != shares_.end() && --s->second.pending <= 0) {
      engine(s->second.engine)->Unpin(s->second.pin);
      shares_.erase(s);
    }
  }
  if (f.followers.empty()) return;
  std::vector<NodeId> followers = std::move(f.followers);
  f.followers.clear();
  ReleaseFollowers(flight_id, std::move(followers));
}

void Executor::ReleaseFollowers(uint64_t flight_id, std::vector<NodeId> followers) {
  const Flight& leader = flights_.at(flight_id);
  Share share;
  share.engine = leader.engine;
  share.pin = engine(leader.engine)->Pin(leader.prefix, 0);
  for (NodeId n : followers) {
    auto ex = progress_.find(n);
    if (ex == progress_.end() || ex->second.wait_leader != flight_id || dag_.node(n).Finished())
      continue;
    ex->second.wait_leader = 0;
    uint64_t fid = 0;
    SubmitOrFail(n, share.engine, &fid);
    if (fid) {
      flights_.at(fid).share = flight_id;
      ++share.pending;
    }
  }
  if (share.pending > 0)
    shares_[flight_id] = share;
  else
    engine(share.engine)->Unpin(share.pin);
}

void Executor::OnSegmentDone(NodeId n, const Completion& c) {
  DagNode& node = dag_.node(n);
  if (node.Finished()) return;
  node.prompt_tokens += c.usage.prompt_tokens;
  node.cached_tokens += c.usage.cached_tokens;
  node.host_tokens += c.usage.host_tokens;
  node.generated_tokens += c.usage.generated_tokens;
  if (c.finish_reason == "error") return Fail(n, c.error.empty() ? "engine error" : c.error);
  if (c.finish_reason == "cancelled") return Fail(n, "the engine cancelled the request");
  Progress& ex = progress_[n];
  const OutputSpec& spec = node.fn->outputs()[static_cast<size_t>(ex.output)];
  std::string value = c.text;
  if (spec.kind == OutputSpec::Kind::kSelect) {
    if (!ScoreSelect(n, c, &value)) return;
  } else if (spec.kind == OutputSpec::Kind::kRegex) {
    auto dfa = RegexDfa::Compile(spec.pattern);
    if (dfa.ok() && !dfa->FullMatch(value))
      return Fail(n, "output '" + spec.name + "' = \"" + value + "\" does not match /" +
                         spec.pattern + "/ (finish: " + c.finish_reason + ")");
  }
  // The model began with a stop string (a newline after "Summary:") or
  // ended at once: the output is empty, which is rarely what the template
  // meant.
  if (spec.kind == OutputSpec::Kind::kGen && !spec.stop.empty() && c.finish_reason == "stop" &&
      value.empty() && c.usage.generated_tokens <= 1 && spec.min_tokens == 0) {
    if (!node.warning.empty()) node.warning += "; ";
    node.warning += "gen '" + spec.name +
                    "' ended at its first token on a stop string and is empty (min_tokens=1 "
                    "lets it start past one)";
  }
  FinishSegment(n, c, std::move(value));
}

bool Executor::ScoreSelect(NodeId n, const Completion& c, std::string* value) {
  Progress& ex = progress_[n];
  const OutputSpec& spec = dag_.node(n).fn->outputs()[static_cast<size_t>(ex.output)];
  auto lps = ChoiceLogprobs(c);
  if (!lps || lps->size() != spec.choices.size() || ex.choice_tokens.size() != lps->size()) {
    Fail(n, "the engine returned no scores for the choices of '" + spec.name + "'");
    return false;
  }
  if (spec.scoring == OutputSpec::Scoring::kUnconditional && !ex.conditional) {
    ex.conditional = *lps;  // now the same choices after no prompt
    SubmitOrFail(n, ex.engine);
    return false;
  }
  SelectResult chosen = ChooseSelect(spec, *lps, ex.conditional, ex.choice_tokens);
  ex.conditional.reset();
  *value = std::move(chosen.value);
  ex.scores[spec.name] = std::move(chosen.scores);
  return true;
}

// Output `value` is done: the next output continues in the same context, or
// the call is complete (after the response's way back in the baseline).
void Executor::FinishSegment(NodeId n, const Completion& c, std::string value) {
  DagNode& node = dag_.node(n);
  Progress& ex = progress_[n];
  const OutputSpec& spec = node.fn->outputs()[static_cast<size_t>(ex.output)];
  ex.values[spec.name] = std::move(value);
  const int outputs = static_cast<int>(node.fn->outputs().size());
  if (spec.kind == OutputSpec::Kind::kGen && ex.output + 1 == outputs) {
    std::vector<int32_t> context = std::move(ex.prompt.tokens);
    context.insert(context.end(), c.tokens.begin(), c.tokens.end());
    kept_.Keep(node.fn->spec().name, ex.engine, std::move(context));
  }
  ex.prompt = {};
  ++ex.output;
  if (ex.output < outputs) {
    SubmitOrFail(n, ex.engine);
    return;
  }
  node.run_ms = MsBetween(ex.started, Clock::now());
  if (!dag_mode() && options_.rtt_ms > 0) {
    ex.done_at = Clock::now() + HalfTrip(options_.rtt_ms);
    return;
  }
  CompleteNode(n);
}

// ---- scheduling -------------------------------------------------------------

void Executor::Schedule(Clock::time_point now) {
  std::vector<NodeId> ready = ReadyCalls(now);
  if (ready.empty()) return;
  if (!dag_mode()) return ScheduleBaseline(std::move(ready), now);
  std::vector<NodeId> prepared;
  for (NodeId n : DispatchOrder(dag_, ready)) {
    Status s = Prepare(n);
    if (!s.ok())
      Fail(n, s.message());
    else
      prepared.push_back(n);
  }
  const std::set<NodeId> held = LeadSharedPrefixes(prepared);
  for (NodeId n : prepared) {
    if (held.count(n)) continue;
    if (!FollowInFlight(n)) SubmitOrFail(n, -1);
  }
}

// Ready: runnable (eager or wanted), waiting, every input ready.
std::vector<NodeId> Executor::ReadyCalls(Clock::time_point now) {
  std::vector<NodeId> ready;
  for (size_t i = 1; i <= dag_.num_nodes(); ++i) {
    DagNode& node = dag_.node(i);
    if (node.state != NodeState::kWaiting || !node.Runnable()) continue;
    bool all = true;
    std::string bad;
    for (VarId v : node.inputs) {
      const DagVar& var = dag_.var(v);
      if (var.state == VarState::kFailed || var.state == VarState::kCancelled) bad = var.error;
      all &= var.state == VarState::kReady;
    }
    if (!bad.empty()) {
      Fail(i, bad, /*cancelled=*/false, /*inherited=*/true);
      continue;
    }
    if (!all) continue;
    if (node.kind == DagNode::Kind::kJoin) {
      RunJoin(i);
      continue;
    }
    // Resume: a call whose inputs only now became ready may have been
    // recorded by the interrupted run.
    if (Replay(i)) {
      Notify();  // the program may be waiting on it; its consumers are scheduled next pass
      continue;
    }
    Progress& ex = progress_[i];
    if (ex.ready_since == Clock::time_point{}) ex.ready_since = now;
    ready.push_back(i);
  }
  return ready;
}

// Baseline: each call is its own request, sent after the client's round
// trip; the blocking client has at most one call out, the oldest ready.
void Executor::ScheduleBaseline(std::vector<NodeId> ready, Clock::time_point now) {
  if (options_.mode == Mode::kBaseline) {
    if (!Idle()) return;
    ready.erase(ready.begin() + 1, ready.end());  // `ready` is in node (program) order
  }
  for (NodeId n : ready) {
    dag_.node(n).state = NodeState::kReady;
    // The request's way out: half of the round trip (the other half on the way back).
    if (options_.rtt_ms > 0)
      progress_[n].send_at = now + HalfTrip(options_.rtt_ms);
    else
      SubmitOrFail(n, -1);
  }
}

// Prefix sharing: the leader of each cluster goes first; its followers wait
// until its prompt is cached (OnAdmitted), unless the prefix already is.
std::set<NodeId> Executor::LeadSharedPrefixes(const std::vector<NodeId>& prepared) {
  std::vector<const std::vector<int32_t>*> prompts;
  for (NodeId n : prepared) prompts.push_back(&progress_[n].prompt.tokens);
  std::set<NodeId> held;
  for (const PrefixCluster& c : ClusterByPrefix(prompts, kShareMinTokens)) {
    const NodeId leader = prepared[c.leader];
    const Progress& lex = progress_[leader];
    const std::vector<int32_t>& lp = lex.prompt.tokens;
    // Holding followers back until the leader's prompt is cached pays only
    // when the shared part dominates their prompts; a short shared template
    // prefix is cheaper to recompute in the same batch than to wait for.
    if (c.shared < kShareWorthTokens || 2 * c.shared < lp.size()) continue;
    const std::vector<int32_t> prefix(lp.begin(), lp.begin() + static_cast<long>(c.shared));
    PlacementNeeds needs;
    needs.needs_local =
        NeedsLocal(dag_.node(leader).fn->outputs()[static_cast<size_t>(lex.output)]);
    const int engine = ctx_->placement->Pick(prefix, needs);
    if (engine < 0) continue;  // each fails on its own, with the reason
    if (this->engine(engine)->ProbePrefix(prefix, 0) + static_cast<int>(kShareMinTokens) >
        static_cast<int>(c.shared))
      continue;  // already cached: everyone can go now
    uint64_t fid = 0;
    SubmitOrFail(leader, engine, &fid);
    held.insert(leader);
    for (size_t fi : c.followers) {
      const NodeId f = prepared[fi];
      held.insert(f);
      if (!fid) {
        SubmitOrFail(f, -1);
        continue;
      }
      dag_.node(f).state = NodeState::kReady;
      progress_[f].wait_leader = fid;
      flights_.at(fid).followers.push_back(f);
    }
    if (fid) flights_.at(fid).prefix = prefix;
  }
  return held;
}

// A sharer that becomes ready while the request computing its prefix is
// still in prefill (it arrived in an earlier pass) waits for that request
// instead of computing the prefix a second time.
bool Executor::FollowInFlight(NodeId n) {
  const std::vector<int32_t>& prompt = progress_[n].prompt.tokens;
  for (auto& [fid, f] : flights_) {
    if (f.admitted) continue;
    auto lead = progress_.find(f.node);
    if (lead == progress_.end()) continue;
    const std::vector<int32_t>& lp = lead->second.prompt.tokens;
    size_t shared = CommonPrefix(lp, prompt);
    shared = shared / kShareMinTokens * kShareMinTokens;
    if (shared < kShareWorthTokens || 2 * shared < lp.size()) continue;
    if (engine(f.engine)->ProbePrefix(prompt, 0) + static_cast<int>(kShareMinTokens) >
        static_cast<int>(shared))
      return false;  // already cached there: go now
    if (f.prefix.empty() || f.prefix.size() > shared)
      f.prefix.assign(lp.begin(), lp.begin() + static_cast<long>(shared));
    f.followers.push_back(n);
    dag_.node(n).state = NodeState::kReady;
    progress_[n].wait_leader = fid;
    return true;
  }
  return false;
}

void Executor::PushGoals() {
  if (!dag_mode()) return;
  const double now = NowMs();
  for (auto& [fid, f] : flights_) {
    const DagNode& n = dag_.node(f.node);
    if (n.goal == f.goal && n.priority == f.priority && n.latest_finish_ms == f.latest_finish_ms)
      continue;
    f.goal = n.goal;
    f.priority = n.priority;
    f.latest_finish_ms = n.latest_finish_ms;
    std::optional<double> deadline;
    if (n.latest_finish_ms) deadline = std::max(0.0, *n.latest_finish_ms - now);
    f.handle->SetGoal(GoalOf(n), n.priority, deadline);
  }
}

// ---- submission -------------------------------------------------------------

Status Executor::Prepare(NodeId n) {
  Progress& ex = progress_[n];
  ex.prompt = {};
  BRAID_ASSIGN_OR_RETURN(ex.prompt, RenderCallPrompt(model(), dag_, dag_.node(n), ex.output,
                                                     ex.values, options_.max_value_bytes));
  return Status::Ok();
}

// The request for the node's current output, with the run's identity and,
// in DAG mode, the node's goal.
Result<GenerationRequest> Executor::Request(NodeId n) {
  const DagNode& node = dag_.node(n);
  Progress& ex = progress_[n];
  const OutputSpec& spec = node.fn->outputs()[static_cast<size_t>(ex.output)];
  BRAID_ASSIGN_OR_RETURN(
      GenerationRequest r,
      OutputRequest(model(), spec, ex.prompt, ex.conditional.has_value(), &ex.choice_tokens));
  r.client = options_.client.empty() ? id_ : options_.client;
  r.program = id_;
  // Calls of one semantic function by one client (a run, unless the caller
  // names a client) are siblings: speculation guesses from their outputs.
  r.spec_group = r.client + "/" + node.fn->spec().name + "/" + spec.name;
  if (dag_mode()) {
    r.goal = GoalOf(node);
    r.priority = node.priority;
    if (node.latest_finish_ms) r.deadline_ms = std::max(0.0, *node.latest_finish_ms - NowMs());
  }
  return r;
}

DeltaCallback Executor::Callback(uint64_t fid, const Flight& f, NodeId n) {
  std::shared_ptr<Inbox> inbox = inbox_;
  std::shared_ptr<RunEvents> events = events_;
  std::shared_ptr<std::atomic<int>> live = f.live_tokens;
  RunEvent tokens;
  tokens.kind = RunEvent::Kind::kTokens;
  tokens.node = n;
  tokens.var = dag_.node(n).outputs[static_cast<size_t>(progress_[n].output)];
  bool first = false;
  return [inbox, fid, first, live, events, tokens](const Delta& d) mutable {
    // A remote engine streams text without token ids: each chunk of text
    // counts as one token (those servers stream a token per chunk). An
    // embedded engine's final delta may carry held-back text of tokens
    // already counted.
    const size_t count = d.tokens.empty() && !d.text.empty() && !d.finished ? 1 : d.tokens.size();
    live->fetch_add(static_cast<int>(count), std::memory_order_relaxed);
    if (!d.text.empty()) {
      tokens.text = d.text;
      events->Emit(tokens);
    }
    const bool report_first = !first && (count > 0 || d.finished);
    if (!report_first && !d.finished) return;
    first = true;
    {
      std::lock_guard<std::mutex> lock(inbox->mu);
      if (report_first && !d.finished) inbox->events.push_back({fid, false});
      if (d.finished) inbox->events.push_back({fid, true});
    }
    inbox->wake->Raise();
  };
}

// A full engine (kResourceExhausted: its queue, a remote engine's
// max_in_flight) passes the request to another that can take it.
Result<std::shared_ptr<RequestHandle>> Executor::SubmitAnywhere(const GenerationRequest& r,
                                                                const DeltaCallback& cb,
                                                                bool needs_local, int* engine) {
  auto submitted = this->engine(*engine)->Submit(r, cb);
  auto full = [](const Status& s) { return s.code() == StatusCode::kResourceExhausted; };
  const EnginePlacement& placement = *ctx_->placement;
  for (int i = 0; !submitted.ok() && full(submitted.status()) && i < ctx_->num_engines(); ++i) {
    if (i == *engine || !placement.CanTake(i, needs_local)) continue;
    auto other = this->engine(i)->Submit(r, cb);
    if (!other.ok()) continue;
    submitted = std::move(other);
    *engine = i;
  }
  return submitted;
}

Status Executor::Submit(NodeId n, int engine, uint64_t* flight_id) {
  DagNode& node = dag_.node(n);
  if (progress_[n].prompt.tokens.empty()) BRAID_RETURN_IF_ERROR(Prepare(n));
  Progress& ex = progress_[n];
  const OutputSpec& spec = node.fn->outputs()[static_cast<size_t>(ex.output)];
  // A given engine (the leader's, the node's earlier outputs') is kept only
  // while it can take this output.
  PlacementNeeds needs;
  needs.prefer_prefix = dag_mode();
  needs.needs_local = NeedsLocal(spec);
  needs.latency = dag_mode() && node.goal == Criteria::kLatency;
  const EnginePlacement& placement = *ctx_->placement;
  if (!placement.CanTake(engine, needs.needs_local))
    engine = placement.Pick(ex.prompt.tokens, needs);
  if (engine < 0) return Status::Unsupported(placement.NoEngineReason(needs.needs_local));
  BRAID_ASSIGN_OR_RETURN(GenerationRequest r, Request(n));

  const uint64_t fid = ++next_flight_;
  Flight f;
  auto submitted = SubmitAnywhere(r, Callback(fid, f, n), needs.needs_local, &engine);
  // When every engine is full the node waits and is sent again shortly, not failed.
  if (!submitted.ok() && submitted.status().code() == StatusCode::kResourceExhausted) {
    ex.send_at = Clock::now() + kFullRetry;
    if (node.state == NodeState::kWaiting) node.state = NodeState::kReady;
    return Status::Ok();
  }
  if (!submitted.ok()) return submitted.status();
  ++*ctx_->engine(engine).in_flight;
  f.node = n;
  f.engine = engine;
  f.handle = std::move(submitted).value();
  f.goal = node.goal;
  f.priority = node.priority;
  f.latest_finish_ms = node.latest_finish_ms;
  f.holds = kept_.Match(r.prompt);
  flights_.emplace(fid, std::move(f));
  if (flight_id) *flight_id = fid;
  Started(n, engine);
  return Status::Ok();
}

// Node `n`'s request went to `engine`: the node runs from its first one.
void Executor::Started(NodeId n, int engine) {
  DagNode& node = dag_.node(n);
  Progress& ex = progress_[n];
  ex.engine = engine;
  node.engine = ctx_->engine(engine).name;
  if (ex.submitted_once) return;
  ex.submitted_once = true;
  ex.started = Clock::now();
  node.queued_ms = MsBetween(ex.ready_since, ex.started);
  node.start_ms = NowMs();
  node.state = NodeState::kRunning;
  events_->Node("node_started", node);
  changed_.notify_all();
}

void Executor::SubmitOrFail(NodeId n, int engine, uint64_t* flight_id) {
  Status s = Submit(n, engine, flight_id);
  if (!s.ok()) Fail(n, s.message());
}

// ---- completion -------------------------------------------------------------

void Executor::RunJoin(NodeId n) {
  DagNode& node = dag_.node(n);
  size_t bytes = 0;
  for (size_t i = 0; i < node.parts.size(); ++i)
    bytes += (i ? node.sep.size() : 0) + ArgValue(dag_, node.parts[i]).size();
  if (bytes > options_.max_value_bytes) {
    Fail(n, "join: the joined value would be " + std::to_string(bytes) +
                " bytes, more than the limit of " + std::to_string(options_.max_value_bytes) +
                " (RunOptions::max_value_bytes)");
    return;
  }
  if (options_.memory) {
    if (Status s = options_.memory->Take(bytes); !s.ok()) return Fail(n, "join: " + s.message());
  }
  std::string out;
  out.reserve(bytes);
  for (size_t i = 0; i < node.parts.size(); ++i) {
    if (i) out += node.sep;
    out += ArgValue(dag_, node.parts[i]);
  }
  DagVar& v = dag_.var(node.outputs[0]);
  v.value = std::move(out);
  v.state = VarState::kReady;
  node.state = NodeState::kDone;
  changed_.notify_all();
}

// Records the call (durably, when there is a store) before its outputs
// become ready, so an acknowledged value survives a crash.
void Executor::CompleteNode(NodeId n) {
  DagNode& node = dag_.node(n);
  if (node.Finished()) return;
  Progress& ex = progress_[n];
  if (options_.memory) {
    size_t bytes = 0;
    for (const auto& [_, value] : ex.values) bytes += value.size();
    if (Status s = options_.memory->Take(bytes); !s.ok()) return Fail(n, s.message());
  }
  if (ctx_->store) {
    StoredCall call;
    call.key = CallKeyString(dag_, node);
    call.function = node.fn->spec().name;
    call.outputs = ex.values;
    if (!ex.scores.empty()) call.outputs[std::string(kScoresKey)] = EncodeScores(ex.scores);
    Status s = ctx_->store->RecordCall(id_, call);
    if (!s.ok()) return Fail(n, "could not record the call: " + s.message());
  }
  for (VarId v : node.outputs) {
    DagVar& var = dag_.var(v);
    var.value = ex.values[var.name];
    if (auto s = ex.scores.find(var.name); s != ex.scores.end()) var.scores = s->second;
    var.state = VarState::kReady;
  }
  node.state = NodeState::kDone;
  node.end_ms = NowMs();
  progress_.erase(n);
  events_->Node("node_finished", node);
  changed_.notify_all();
}

bool Executor::Replay(NodeId id) {
  DagNode& n = dag_.node(id);
  if (!resumed_ || !ctx_->store || n.kind != DagNode::Kind::kCall || n.Finished()) return false;
  for (VarId v : n.inputs)
    if (dag_.var(v).state != VarState::kReady) return false;
  auto found = ctx_->store->FindCall(id_, CallKeyString(dag_, n));
  if (!found.ok() || !found.value()) return false;
  const StoredCall& call = *found.value();
  // The recorded outputs must be exactly the function's (beside the scores
  // of its select outputs, under a key no output can have).
  const auto scores_at = call.outputs.find(std::string(kScoresKey));
  const bool has_scores = scores_at != call.outputs.end();
  if (call.outputs.size() - (has_scores ? 1 : 0) != n.fn->outputs().size()) return false;
  for (const auto& o : n.fn->outputs())
    if (!call.outputs.count(o.name)) return false;
  std::map<std::string, ChoiceScores> scores;
  if (has_scores) scores = DecodeScores(scores_at->second);
  for (VarId out : n.outputs) {
    DagVar& v = dag_.var(out);
    v.value = call.outputs.at(v.name);
    if (auto s = scores.find(v.name); s != scores.end()) v.scores = std::move(s->second);
    v.state = VarState::kReady;
  }
  n.state = NodeState::kDone;
  n.engine = "store";
  return true;
}

void Executor::SetVarFailed(VarId id, const std::string& message, bool cancelled) {
  DagVar& v = dag_.var(id);
  if (v.state != VarState::kPending) return;
  v.state = cancelled ? VarState::kCancelled : VarState::kFailed;
  v.error = message;
}

void Executor::Fail(NodeId n, const std::string& cause, bool cancelled, bool inherited) {
  DagNode& node = dag_.node(n);
  if (node.Finished()) return;
  const std::string message = cancelled   ? "cancelled"
                              : inherited ? cause
                                          : "node " + node.Name() + " failed: " + cause;
  node.state = cancelled ? NodeState::kCancelled : NodeState::kFailed;
  node.error = cancelled ? "cancelled" : inherited ? message : cause;
  node.end_ms = NowMs();
  progress_.erase(n);
  for (VarId v : node.outputs) SetVarFailed(v, message, cancelled);
  if (!cancelled && !inherited) events_->Node("node_failed", node, cause);
  for (NodeId d : dag_.Downstream(n)) {
    DagNode& dn = dag_.node(d);
    if (dn.Finished()) continue;
    dn.state = cancelled ? NodeState::kCancelled : NodeState::kFailed;
    dn.error = message;
    progress_.erase(d);
    for (VarId v : dn.outputs) SetVarFailed(v, message, cancelled);
  }
  changed_.notify_all();
}

}  // namespace braid::rt
