// Execution of a Run, on the dispatcher thread: picking ready and wanted
// nodes, rendering and submitting their prompts, prefix co-scheduling,
// baseline round trips, completions, persistence and failure propagation.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "exec/prefix_groups.h"
#include "exec/stored_scores.h"
#include "exec/token_mask.h"
#include "run_impl.h"
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

// Select outputs score choices and regex outputs mask logits: both need the
// model in this process.
bool NeedsLocal(const OutputSpec& spec) {
  return spec.kind == OutputSpec::Kind::kSelect || spec.kind == OutputSpec::Kind::kRegex;
}

// The engine's scoring and logit-mask hooks are being added; these compile
// either way and report whether the field exists in this build.
template <typename Req>
bool SetScoreChoices(Req& r, std::vector<std::vector<int32_t>> choices) {
  if constexpr (requires { r.score_choices = choices; }) {
    r.score_choices = std::move(choices);
    return true;
  } else {
    return false;
  }
}
template <typename Comp>
std::optional<std::vector<double>> ChoiceLogprobs(const Comp& c) {
  if constexpr (requires { c.choice_logprobs.size(); }) {
    std::vector<double> out;
    for (const auto& lp : c.choice_logprobs) out.push_back(static_cast<double>(lp));
    return out;
  } else {
    return std::nullopt;
  }
}
template <typename Req, typename Fn>
bool SetLogitsProcessor(Req& r, Fn fn) {
  if constexpr (requires { r.logits_processor = fn; }) {
    r.logits_processor = std::move(fn);
    return true;
  } else {
    return false;
  }
}

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

bool RunImpl::Closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  bool delayed = false;
  for (const auto& [id, ex] : exec_) delayed |= ex.done_at.has_value() || ex.send_at.has_value();
  return (cancelled_ || finished_ || shutdown_) && flights_.empty() && !delayed;
}

void RunImpl::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  CancelLocked();
  changed_.notify_all();
}

void RunImpl::CancelLocked() {
  for (auto& [id, f] : flights_) {
    f.handle->Cancel();
    --*ctx_->engines[static_cast<size_t>(f.engine)].in_flight;
    for (const Flight::Hold& h : f.holds) Release(h);
  }
  DropKept();
  flights_.clear();
  for (auto& [id, s] : shares_) ctx_->engines[static_cast<size_t>(s.engine)].engine->Unpin(s.pin);
  shares_.clear();
  for (size_t i = 1; i <= dag_.num_nodes(); ++i)
    if (!dag_.node(i).Finished()) FailNode(i, "cancelled", /*cancelled=*/true);
  exec_.clear();
  cancelled_ = true;
}

std::optional<Clock::time_point> RunImpl::Pump() {
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    events.swap(inbox_->events);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_ || shutdown_) return std::nullopt;
  for (const Event& ev : events) HandleEvent(ev);
  Clock::time_point now = Clock::now();
  // Baseline round trips that are due.
  std::vector<NodeId> sends, dones;
  for (auto& [id, ex] : exec_) {
    if (ex.send_at && *ex.send_at <= now) sends.push_back(id);
    if (ex.done_at && *ex.done_at <= now) dones.push_back(id);
  }
  for (NodeId n : sends) {
    exec_[n].send_at.reset();
    SubmitOrFail(n, -1);
  }
  for (NodeId n : dones) {
    exec_[n].done_at.reset();
    CompleteNode(n);
  }
  Schedule(now);
  std::optional<Clock::time_point> next;
  for (const auto& [id, ex] : exec_)
    for (const auto& t : {ex.send_at, ex.done_at})
      if (t && (!next || *t < *next)) next = *t;
  ExpireKept(now, &next);
  return next;
}

std::string RunImpl::GapKey(const DagNode& n) const {
  return (options_.program_hash.empty() ? options_.program : options_.program_hash) + "#" +
         n.fn->spec().name;
}

void RunImpl::Keep(NodeId n, int engine, std::vector<int32_t> context) {
  if (!retaining() || finished_ || cancelled_ || shutdown_ || context.empty()) return;
  Kept k;
  k.engine = engine;
  k.fn = GapKey(dag_.node(n));
  k.finished = Clock::now();
  const GapAdvice advice = ctx_->gaps->Advise(k.fn);
  Engine* e = ctx_->engines[static_cast<size_t>(engine)].engine;
  k.hold.engine = engine;
  if (advice.keep) {
    k.expires = k.finished + std::chrono::microseconds(static_cast<int64_t>(advice.ttl_ms * 1000));
    // One expectation, held when pinning: a pin the engine may break when
    // it needs the room (Engine::ExpectUse).
    k.hold.hint = e->ExpectUse(context, 0, advice.expected_ms, ctx_->retention.pin);
  }
  k.tokens = std::move(context);
  if (kept_.size() >= kMaxKept) {
    Release(kept_.front().hold);
    if (!kept_.front().extended) ctx_->gaps->NotExtended(kept_.front().fn);
    kept_.erase(kept_.begin());
  }
  kept_.push_back(std::move(k));
}

// A call extends a kept context when its prompt starts with at least half of
// it (and a KV block's worth): the program's next turn, the transcript
// grown by the tool's output.
void RunImpl::MatchKept(const std::vector<int32_t>& prompt, Flight* f) {
  if (!retaining()) return;
  const Clock::time_point now = Clock::now();
  for (Kept& k : kept_) {
    if (k.extended) continue;
    const size_t common = CommonPrefix(prompt, k.tokens);
    if (common < kShareMinTokens || 2 * common < k.tokens.size()) continue;
    k.extended = true;
    ctx_->gaps->Extended(k.fn, MsBetween(k.finished, now));
    if (k.hold.hint) f->holds.push_back(k.hold);
    k.hold.hint = 0;
  }
}

void RunImpl::Release(const Flight::Hold& hold) {
  Engine* e = ctx_->engines[static_cast<size_t>(hold.engine)].engine;
  if (hold.hint) e->ForgetUse(hold.hint);
}

void RunImpl::ExpireKept(Clock::time_point now, std::optional<Clock::time_point>* next) {
  for (Kept& k : kept_) {
    if (!k.hold.hint) continue;
    if (k.expires <= now) {
      Release(k.hold);
      k.hold.hint = 0;
    } else if (!*next || k.expires < **next) {
      *next = k.expires;
    }
  }
}

void RunImpl::DropKept() {
  for (Kept& k : kept_) {
    Release(k.hold);
    if (!k.extended && ctx_->gaps) ctx_->gaps->NotExtended(k.fn);
  }
  kept_.clear();
}

void RunImpl::HandleEvent(const Event& ev) {
  auto it = flights_.find(ev.flight);
  if (it == flights_.end()) return;  // cancelled meanwhile
  if (!it->second.admitted) OnAdmitted(ev.flight);
  if (!ev.finished) return;
  it = flights_.find(ev.flight);
  Flight f = std::move(it->second);
  flights_.erase(it);
  --*ctx_->engines[static_cast<size_t>(f.engine)].in_flight;
  const Completion c = f.handle->Wait();
  if (MoveFromDeadEngine(f.node, f.engine, c)) return;
  OnSegmentDone(f.node, c);
}

// A request that failed because its engine went away (the engine reports
// itself not alive) is sent again elsewhere: the segment starts over, the
// outputs already generated are kept.
bool RunImpl::MoveFromDeadEngine(NodeId n, int engine, const Completion& c) {
  if (c.finish_reason != "error") return false;
  const EngineSlot& slot = ctx_->engines[static_cast<size_t>(engine)];
  if (slot.engine->alive()) return false;
  DagNode& node = dag_.node(n);
  auto it = exec_.find(n);
  if (node.Finished() || it == exec_.end() || it->second.moves >= kMaxMoves) return false;
  ++it->second.moves;
  node.prompt_tokens += c.usage.prompt_tokens;
  node.cached_tokens += c.usage.cached_tokens;
  node.generated_tokens += c.usage.generated_tokens;
  const std::string why = slot.name + " is not alive after: " + c.error;
  LogEvent("node_moved", node, why);
  Status s = Submit(n, -1, nullptr);
  if (!s.ok()) FailNode(n, why + "; moving it elsewhere failed: " + s.message());
  return true;
}

// The request's first token arrived (or it ended): its prompt is in the
// engine's prefix cache. A leader releases its followers onto the same
// engine, with the shared prefix pinned until the last of them is admitted.
void RunImpl::OnAdmitted(uint64_t flight_id) {
  Flight& f = flights_.at(flight_id);
  f.admitted = true;
  for (const Flight::Hold& h : f.holds) Release(h);
  f.holds.clear();
  if (DagNode& node = dag_.node(f.node); node.first_token_ms < 0) node.first_token_ms = NowMs();
  if (f.share) {
    auto s = shares_.find(f.share);
    if (s != shares_.end() && --s->second.pending <= 0) {
      ctx_->engines[static_cast<size_t>(s->second.engine)].engine->Unpin(s->second.pin);
      shares_.erase(s);
    }
  }
  if (f.followers.empty()) return;
  const std::vector<NodeId> followers = std::move(f.followers);
  f.followers.clear();
  const int engine = f.engine;
  Share share;
  share.engine = engine;
  share.pin = ctx_->engines[static_cast<size_t>(engine)].engine->Pin(f.prefix, 0);
  for (NodeId n : followers) {
    auto ex = exec_.find(n);
    if (ex == exec_.end() || ex->second.wait_leader != flight_id || dag_.node(n).Finished())
      continue;
    ex->second.wait_leader = 0;
    uint64_t fid = 0;
    SubmitOrFail(n, engine, &fid);
    if (fid) {
      flights_.at(fid).share = flight_id;
      ++share.pending;
    }
  }
  if (share.pending > 0)
    shares_[flight_id] = share;
  else
    ctx_->engines[static_cast<size_t>(engine)].engine->Unpin(share.pin);
}

void RunImpl::OnSegmentDone(NodeId n, const Completion& c) {
  DagNode& node = dag_.node(n);
  if (node.Finished()) return;
  Exec& ex = exec_[n];
  node.prompt_tokens += c.usage.prompt_tokens;
  node.cached_tokens += c.usage.cached_tokens;
  node.generated_tokens += c.usage.generated_tokens;
  if (c.finish_reason == "error") return FailNode(n, c.error.empty() ? "engine error" : c.error);
  if (c.finish_reason == "cancelled") return FailNode(n, "the engine cancelled the request");
  const OutputSpec& spec = node.fn->outputs()[static_cast<size_t>(ex.output)];
  std::string value = c.text;
  if (spec.kind == OutputSpec::Kind::kSelect) {
    auto lps = ChoiceLogprobs(c);
    if (!lps || lps->size() != spec.choices.size() || ex.choice_tokens.size() != lps->size())
      return FailNode(n, "the engine returned no scores for the choices of '" + spec.name + "'");
    using S = OutputSpec::Scoring;
    if (spec.scoring == S::kUnconditional && !ex.conditional) {
      ex.conditional = *lps;  // now the same choices after no prompt
      SubmitOrFail(n, ex.engine);
      return;
    }
    std::vector<double> score = *lps;
    for (size_t i = 0; i < score.size(); ++i) {
      if (spec.scoring == S::kUnconditional) score[i] = (*ex.conditional)[i] - score[i];
      if (spec.scoring != S::kSum)
        score[i] /= static_cast<double>(std::max<size_t>(1, ex.choice_tokens[i]));
    }
    ex.conditional.reset();
    size_t best = 0;
    for (size_t i = 1; i < score.size(); ++i)
      if (score[i] > score[best]) best = i;
    value = spec.choices[best];
    ChoiceScores& scores = ex.scores[spec.name];
    scores.clear();
    for (size_t i = 0; i < score.size(); ++i) scores.emplace_back(spec.choices[i], score[i]);
  } else if (spec.kind == OutputSpec::Kind::kRegex) {
    auto dfa = RegexDfa::Compile(spec.pattern);
    if (dfa.ok() && !dfa->FullMatch(value))
      return FailNode(n, "output '" + spec.name + "' = \"" + value + "\" does not match /" +
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
  ex.values[spec.name] = std::move(value);
  if (spec.kind == OutputSpec::Kind::kGen &&
      ex.output + 1 == static_cast<int>(node.fn->outputs().size())) {
    std::vector<int32_t> context = std::move(ex.prompt);
    context.insert(context.end(), c.tokens.begin(), c.tokens.end());
    Keep(n, ex.engine, std::move(context));
  }
  ex.prompt.clear();
  ++ex.output;
  if (ex.output < static_cast<int>(node.fn->outputs().size())) {
    SubmitOrFail(n, ex.engine);  // the next output continues in the same context
    return;
  }
  node.run_ms = MsBetween(ex.started, Clock::now());
  if (!dag_mode() && options_.rtt_ms > 0) {
    ex.done_at =
        Clock::now() + std::chrono::microseconds(options_.rtt_ms *
                                                 500);  // the response's way back (half the trip)
    return;
  }
  CompleteNode(n);
}

Status RunImpl::Prepare(NodeId n) {
  DagNode& node = dag_.node(n);
  Exec& ex = exec_[n];
  std::vector<ChatMessage> msgs;
  size_t bytes = 0;
  if (node.fn->chat()) {
    BRAID_ASSIGN_OR_RETURN(msgs, RenderMessages(node, &bytes));
  }
  BRAID_ASSIGN_OR_RETURN(std::vector<PromptPiece> pieces,
                         Render(node, ex.output, ex.values, bytes));
  if (node.fn->chat()) {
    // Chat style: the system text and messages, then the rendered template
    // as the final user message; every content is plain text, and only the
    // chat template's markup yields special tokens.
    msgs.push_back({"user", JoinPieces(pieces)});
    pieces = model().FormatChat(msgs, /*add_generation_prompt=*/true);
  }
  ex.prompt = model().Tokenize(pieces);
  ex.prompt_pieces = std::move(pieces);
  if (ex.prompt.empty()) return Status::InvalidArgument("the rendered prompt is empty");
  return Status::Ok();
}

std::pair<std::vector<int32_t>, std::vector<std::vector<int32_t>>> RunImpl::ChoiceTokens(
    const std::vector<int32_t>& prompt, const std::vector<PromptPiece>& pieces,
    const std::vector<std::string>& choices) const {
  // Each choice tokenized as the end of prompt + choice: where the two meet
  // (a space ending the prompt, a space starting the choice) the tokens are
  // the ones the tokenizer makes of the whole, so "Action: " + "calculator"
  // scores " calculator" as "Action:" + " calculator" does. The prompt scored
  // is the part every choice's tokens share with it; choices are template
  // literals, so they may name special tokens.
  std::vector<std::vector<int32_t>> full;
  size_t shared = prompt.size();
  for (const auto& choice : choices) {
    std::vector<PromptPiece> with_choice = pieces;
    AppendPiece(with_choice, choice, /*allow_special=*/true);
    full.push_back(model().Tokenize(with_choice));
    const auto& f = full.back();
    const size_t n = std::min(prompt.size(), f.size());
    size_t common =
        std::mismatch(prompt.begin(), prompt.begin() + static_cast<long>(n), f.begin()).first -
        prompt.begin();
    if (common == f.size()) common = 0;  // the choice added no token of its own
    shared = std::min(shared, common);
  }
  std::vector<std::vector<int32_t>> conts;
  if (shared > 0) {
    for (const auto& f : full) conts.emplace_back(f.begin() + static_cast<long>(shared), f.end());
    return {std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<long>(shared)),
            conts};
  }
  // No prompt token survives the meeting: each choice on its own after the
  // whole prompt.
  const std::vector<int32_t> bos = model().TokenizeRaw("");
  for (const auto& choice : choices) {
    std::vector<int32_t> alone = model().TokenizeRaw(choice);
    if (!bos.empty() && alone.size() > bos.size())
      alone.erase(alone.begin(), alone.begin() + static_cast<long>(bos.size()));
    conts.push_back(std::move(alone));
  }
  return {prompt, conts};
}

Status RunImpl::Submit(NodeId n, int engine, uint64_t* flight_id) {
  DagNode& node = dag_.node(n);
  Exec& ex = exec_[n];
  if (ex.prompt.empty()) BRAID_RETURN_IF_ERROR(Prepare(n));
  const OutputSpec& spec = node.fn->outputs()[static_cast<size_t>(ex.output)];
  // A given engine (the leader's, the node's earlier outputs') is kept only
  // while it can take this output.
  const bool needs_local = NeedsLocal(spec);
  if (!ctx_->CanTake(engine, needs_local))
    engine = ctx_->PickEngine(ex.prompt, 0, dag_mode(), needs_local,
                              dag_mode() && node.goal == Criteria::kLatency);
  if (engine < 0) return Status::Unsupported(ctx_->NoEngineReason(needs_local));
  Engine* const picked = ctx_->engines[static_cast<size_t>(engine)].engine;

  GenerationRequest r;
  r.prompt = ex.prompt;
  r.sampling.temperature = spec.temperature;
  r.sampling.top_p = spec.top_p;
  if (spec.seed) r.sampling.seed = *spec.seed;
  r.sampling.max_tokens = spec.max_tokens;
  r.sampling.min_tokens = std::min(spec.min_tokens, spec.max_tokens);
  r.sampling.stop = spec.stop;
  r.client = options_.client.empty() ? id_ : options_.client;
  r.program = id_;
  // Calls of one semantic function by one client (a run, unless the caller
  // names a client) are siblings: speculation guesses from their outputs.
  r.spec_group = r.client + "/" + node.fn->spec().name + "/" + spec.name;
  if (dag_mode()) {
    r.goal = node.goal == Criteria::kLatency ? GoalClass::kLatency : GoalClass::kThroughput;
    r.priority = node.priority;
    if (node.latest_finish_ms) r.deadline_ms = std::max(0.0, *node.latest_finish_ms - NowMs());
  }
  if (spec.kind == OutputSpec::Kind::kSelect) {
    auto [prompt, conts] = ChoiceTokens(ex.prompt, ex.prompt_pieces, spec.choices);
    ex.choice_tokens.clear();
    for (const auto& c : conts) ex.choice_tokens.push_back(c.size());
    // The unconditional pass scores the same tokens after no prompt (the
    // model's BOS, or a newline for a model without one).
    if (ex.conditional) {
      prompt = model().TokenizeRaw("");
      if (prompt.empty()) prompt = model().TokenizeText("\n");
    }
    r.prompt = std::move(prompt);
    r.sampling.max_tokens = 1;
    if (!SetScoreChoices(r, std::move(conts)))
      return Status::Unsupported(
          "select output '" + spec.name +
          "' needs the engine's choice scoring (GenerationRequest::score_choices), "
          "which this build of the engine does not have");
  } else if (spec.kind == OutputSpec::Kind::kRegex) {
    BRAID_ASSIGN_OR_RETURN(RegexDfa dfa, RegexDfa::Compile(spec.pattern));
    auto mask = std::make_shared<RegexMask>(std::make_shared<const RegexDfa>(std::move(dfa)),
                                            TokenTable::ForModel(model()));
    auto fn = [mask](std::span<const int32_t> generated, std::span<float> logits) {
      (*mask)(generated, logits);
    };
    if (!SetLogitsProcessor(r, std::move(fn)))
      return Status::Unsupported(
          "regex output '" + spec.name +
          "' needs the engine's logits hook (GenerationRequest::logits_processor), "
          "which this build of the engine does not have");
  }

  const uint64_t fid = ++next_flight_;
  std::shared_ptr<Inbox> inbox = inbox_;
  bool first = false;
  Flight f;
  auto live = f.live_tokens;
  auto watch = watch_;
  RunEvent tokens;
  tokens.kind = RunEvent::Kind::kTokens;
  tokens.node = n;
  tokens.var = node.outputs[static_cast<size_t>(ex.output)];
  auto cb = [inbox, fid, first, live, watch, tokens](const Delta& d) mutable {
    // A remote engine streams text without token ids: each chunk of text
    // counts as one token (those servers stream a token per chunk). An
    // embedded engine's final delta may carry held-back text of tokens
    // already counted.
    const size_t count = d.tokens.empty() && !d.text.empty() && !d.finished ? 1 : d.tokens.size();
    live->fetch_add(static_cast<int>(count), std::memory_order_relaxed);
    if (!d.text.empty()) {
      tokens.text = d.text;
      watch->Emit(tokens);
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
  // A full engine (kResourceExhausted: its queue, a remote engine's
  // max_in_flight) passes the request to another that can take it; when
  // every one is full the node waits and is sent again shortly, not failed.
  auto submitted = picked->Submit(r, cb);
  auto full = [](const Status& s) { return s.code() == StatusCode::kResourceExhausted; };
  for (size_t i = 0; !submitted.ok() && full(submitted.status()) && i < ctx_->engines.size(); ++i) {
    if (static_cast<int>(i) == engine || !ctx_->CanTake(static_cast<int>(i), needs_local)) continue;
    auto other = ctx_->engines[i].engine->Submit(r, cb);
    if (!other.ok()) continue;
    submitted = std::move(other);
    engine = static_cast<int>(i);
  }
  if (!submitted.ok() && full(submitted.status())) {
    ex.send_at = Clock::now() + kFullRetry;
    if (node.state == NodeState::kWaiting) node.state = NodeState::kReady;
    return Status::Ok();
  }
  if (!submitted.ok()) return submitted.status();
  auto handle = std::move(submitted).value();
  EngineSlot& slot = ctx_->engines[static_cast<size_t>(engine)];
  ++*slot.in_flight;
  f.node = n;
  f.engine = engine;
  f.handle = std::move(handle);
  f.goal = node.goal;
  f.priority = node.priority;
  f.latest_finish_ms = node.latest_finish_ms;
  MatchKept(r.prompt, &f);
  flights_.emplace(fid, std::move(f));
  if (flight_id) *flight_id = fid;
  ex.engine = engine;
  node.engine = slot.name;
  if (!ex.submitted_once) {
    ex.submitted_once = true;
    ex.started = Clock::now();
    node.queued_ms = MsBetween(ex.ready_since, ex.started);
    node.start_ms = NowMs();
    node.state = NodeState::kRunning;
    LogEvent("node_started", node);
    changed_.notify_all();
  }
  return Status::Ok();
}

void RunImpl::SubmitOrFail(NodeId n, int engine, uint64_t* flight_id) {
  Status s = Submit(n, engine, flight_id);
  if (!s.ok()) FailNode(n, s.message());
}

void RunImpl::RunJoin(NodeId n) {
  DagNode& node = dag_.node(n);
  size_t bytes = 0;
  for (size_t i = 0; i < node.parts.size(); ++i)
    bytes += (i ? node.sep.size() : 0) + ArgValue(node.parts[i]).size();
  if (bytes > options_.max_value_bytes) {
    FailNode(n, "join: the joined value would be " + std::to_string(bytes) + " bytes, more than the limit of " +
                    std::to_string(options_.max_value_bytes) + " (RunOptions::max_value_bytes)");
    return;
  }
  if (options_.memory) {
    if (Status s = options_.memory->Take(bytes); !s.ok())
      return FailNode(n, "join: " + s.message());
  }
  std::string out;
  out.reserve(bytes);
  for (size_t i = 0; i < node.parts.size(); ++i) {
    if (i) out += node.sep;
    out += ArgValue(node.parts[i]);
  }
  DagVar& v = dag_.var(node.outputs[0]);
  v.value = std::move(out);
  v.state = VarState::kReady;
  node.state = NodeState::kDone;
  changed_.notify_all();
}

// Records the call (durably, when there is a store) before its outputs
// become ready, so an acknowledged value survives a crash.
void RunImpl::CompleteNode(NodeId n) {
  DagNode& node = dag_.node(n);
  if (node.Finished()) return;
  Exec& ex = exec_[n];
  if (options_.memory) {
    size_t bytes = 0;
    for (const auto& [_, value] : ex.values) bytes += value.size();
    if (Status s = options_.memory->Take(bytes); !s.ok()) return FailNode(n, s.message());
  }
  if (ctx_->store) {
    StoredCall call;
    call.key = CallKeyString(node);
    call.function = node.fn->spec().name;
    call.outputs = ex.values;
    if (!ex.scores.empty()) call.outputs[std::string(kScoresKey)] = EncodeScores(ex.scores);
    Status s = ctx_->store->RecordCall(id_, call);
    if (!s.ok()) return FailNode(n, "could not record the call: " + s.message());
  }
  for (VarId v : node.outputs) {
    DagVar& var = dag_.var(v);
    var.value = ex.values[var.name];
    if (auto s = ex.scores.find(var.name); s != ex.scores.end()) var.scores = s->second;
    var.state = VarState::kReady;
  }
  node.state = NodeState::kDone;
  node.end_ms = NowMs();
  exec_.erase(n);
  LogEvent("node_finished", node);
  changed_.notify_all();
}

void RunImpl::SetVarFailed(VarId id, const std::string& message, bool cancelled) {
  DagVar& v = dag_.var(id);
  if (v.state != VarState::kPending) return;
  v.state = cancelled ? VarState::kCancelled : VarState::kFailed;
  v.error = message;
}

// Fails `n` with `cause`, and with it every unfinished node downstream.
// `inherited`: `cause` is the message of a failed input, passed on as is
// (as the nodes downstream of a failure get it).
void RunImpl::FailNode(NodeId n, const std::string& cause, bool cancelled, bool inherited) {
  DagNode& node = dag_.node(n);
  if (node.Finished()) return;
  const std::string message = cancelled   ? "cancelled"
                              : inherited ? cause
                                          : "node " + node.Name() + " failed: " + cause;
  node.state = cancelled ? NodeState::kCancelled : NodeState::kFailed;
  node.error = cancelled ? "cancelled" : inherited ? message : cause;
  node.end_ms = NowMs();
  exec_.erase(n);
  for (VarId v : node.outputs) SetVarFailed(v, message, cancelled);
  if (!cancelled && !inherited) LogEvent("node_failed", node, cause);
  for (NodeId d : dag_.Downstream(n)) {
    DagNode& dn = dag_.node(d);
    if (dn.Finished()) continue;
    dn.state = cancelled ? NodeState::kCancelled : NodeState::kFailed;
    dn.error = message;
    exec_.erase(d);
    for (VarId v : dn.outputs) SetVarFailed(v, message, cancelled);
  }
  changed_.notify_all();
}

bool RunImpl::Runnable(const DagNode& n) const {
  switch (n.kind) {
    case DagNode::Kind::kHost:
      return false;  // the program sets it
    case DagNode::Kind::kJoin:
      return true;  // cheap, and eager calls may consume it
    case DagNode::Kind::kCall:
      return n.wanted || !n.fn->spec().lazy;
  }
  return false;
}

void RunImpl::PushGoals() {
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
    f.handle->SetGoal(n.goal == Criteria::kLatency ? GoalClass::kLatency : GoalClass::kThroughput,
                      n.priority, deadline);
  }
}

void RunImpl::Schedule(Clock::time_point now) {
  // Ready: runnable (eager or wanted), waiting, every input ready.
  std::vector<NodeId> ready;
  for (size_t i = 1; i <= dag_.num_nodes(); ++i) {
    DagNode& node = dag_.node(i);
    if (node.state != NodeState::kWaiting || !Runnable(node)) continue;
    bool all = true;
    std::string bad;
    for (VarId v : node.inputs) {
      const DagVar& var = dag_.var(v);
      if (var.state == VarState::kFailed || var.state == VarState::kCancelled) bad = var.error;
      all &= var.state == VarState::kReady;
    }
    if (!bad.empty()) {
      FailNode(i, bad, /*cancelled=*/false, /*inherited=*/true);
      continue;
    }
    if (!all) continue;
    if (node.kind == DagNode::Kind::kJoin) {
      RunJoin(i);
      continue;
    }
    // Resume: a call whose inputs only now became ready may have been
    // recorded by the interrupted run.
    if (ReplayFromStore(i)) {
      Notify();  // the program may be waiting on it; its consumers are scheduled next pass
      continue;
    }
    Exec& ex = exec_[i];
    if (ex.ready_since == Clock::time_point{}) ex.ready_since = now;
    ready.push_back(i);
  }
  if (ready.empty()) return;

  if (!dag_mode()) {
    // Baseline: each call is its own request, sent after the client's round
    // trip; the blocking client has at most one call out, the oldest ready.
    if (options_.mode == Mode::kBaseline) {
      bool busy = !flights_.empty();
      for (const auto& [id, ex] : exec_) busy |= ex.send_at.has_value() || ex.done_at.has_value();
      if (busy) return;
      ready.erase(ready.begin() + 1, ready.end());  // `ready` is in node (program) order
    }
    for (NodeId n : ready) {
      dag_.node(n).state = NodeState::kReady;
      // The request's way out: half of the round trip (the other half on the way back).
      if (options_.rtt_ms > 0)
        exec_[n].send_at = now + std::chrono::microseconds(options_.rtt_ms * 500);
      else
        SubmitOrFail(n, -1);
    }
    return;
  }

  // Task groups go as a unit: hold members until every pending member is ready.
  std::set<NodeId> ready_set(ready.begin(), ready.end());
  std::map<int, bool> group_complete;
  for (size_t i = 1; i <= dag_.num_nodes(); ++i) {
    const DagNode& node = dag_.node(i);
    if (!node.group) continue;
    auto [it, fresh] = group_complete.emplace(node.group, true);
    if (node.state == NodeState::kWaiting && node.wanted && !ready_set.count(i)) it->second = false;
  }
  std::vector<NodeId> go;
  for (NodeId n : ready)
    if (!dag_.node(n).group || group_complete[dag_.node(n).group]) go.push_back(n);
  // The engine's own order (MoreUrgent): latency first, then priority, then
  // deadline, then age, where a task group's age is its oldest member's so
  // that the group goes together.
  std::map<int, NodeId> group_first;
  for (NodeId n : go)
    if (int g = dag_.node(n).group) group_first.emplace(g, n);  // `go` is in node order
  auto urgency = [&](NodeId n) {
    const DagNode& node = dag_.node(n);
    return Urgency{node.goal == Criteria::kLatency ? GoalClass::kLatency : GoalClass::kThroughput,
                   node.priority, node.latest_finish_ms,
                   static_cast<double>(node.group ? group_first[node.group] : n), n};
  };
  std::sort(go.begin(), go.end(),
            [&](NodeId a, NodeId b) { return MoreUrgent(urgency(a), urgency(b)); });
  std::vector<NodeId> prepared;
  for (NodeId n : go) {
    Status s = Prepare(n);
    if (!s.ok())
      FailNode(n, s.message());
    else
      prepared.push_back(n);
  }
  // Prefix sharing: the leader of each cluster goes first; its followers wait
  // until its prompt is cached (OnAdmitted), unless the prefix already is.
  std::vector<const std::vector<int32_t>*> prompts;
  for (NodeId n : prepared) prompts.push_back(&exec_[n].prompt);
  std::set<NodeId> held;
  for (const PrefixCluster& c : ClusterByPrefix(prompts, kShareMinTokens)) {
    const NodeId leader = prepared[c.leader];
    const std::vector<int32_t>& lp = exec_[leader].prompt;
    // Holding followers back until the leader's prompt is cached pays only
    // when the shared part dominates their prompts; a short shared template
    // prefix is cheaper to recompute in the same batch than to wait for.
    if (c.shared < kShareWorthTokens || 2 * c.shared < lp.size()) continue;
    const std::vector<int32_t> prefix(lp.begin(), lp.begin() + static_cast<long>(c.shared));
    const Exec& lex = exec_[leader];
    const int engine = ctx_->PickEngine(
        prefix, 0, true,
        NeedsLocal(dag_.node(leader).fn->outputs()[static_cast<size_t>(lex.output)]));
    if (engine < 0) continue;  // each fails on its own, with the reason
    if (ctx_->engines[static_cast<size_t>(engine)].engine->ProbePrefix(prefix, 0) +
            static_cast<int>(kShareMinTokens) >
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
      exec_[f].wait_leader = fid;
      flights_.at(fid).followers.push_back(f);
    }
    if (fid) flights_.at(fid).prefix = prefix;
  }
  for (NodeId n : prepared) {
    if (held.count(n)) continue;
    if (!FollowInFlight(n)) SubmitOrFail(n, -1);
  }
}

// A sharer that becomes ready while the request computing its prefix is
// still in prefill (it arrived in an earlier pass) waits for that request
// instead of computing the prefix a second time.
bool RunImpl::FollowInFlight(NodeId n) {
  const std::vector<int32_t>& prompt = exec_[n].prompt;
  for (auto& [fid, f] : flights_) {
    if (f.admitted) continue;
    auto lead = exec_.find(f.node);
    if (lead == exec_.end()) continue;
    const std::vector<int32_t>& lp = lead->second.prompt;
    size_t shared = 0;
    while (shared < lp.size() && shared < prompt.size() && lp[shared] == prompt[shared]) ++shared;
    shared = shared / kShareMinTokens * kShareMinTokens;
    if (shared < kShareWorthTokens || 2 * shared < lp.size()) continue;
    if (ctx_->engines[static_cast<size_t>(f.engine)].engine->ProbePrefix(prompt, 0) +
            static_cast<int>(kShareMinTokens) >
        static_cast<int>(shared))
      return false;  // already cached there: go now
    if (f.prefix.empty() || f.prefix.size() > shared)
      f.prefix.assign(lp.begin(), lp.begin() + static_cast<long>(shared));
    f.followers.push_back(n);
    dag_.node(n).state = NodeState::kReady;
    exec_[n].wait_leader = fid;
    return true;
  }
  return false;
}

}  // namespace braid::rt
