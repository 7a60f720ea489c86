// Building, waiting and introspection of a Run (program thread). Execution —
// what the dispatcher does in Pump — is in exec/run_exec.cpp.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "exec/stored_scores.h"
#include "run_impl.h"
#include "store/run_store.h"

namespace braid::rt {

RunImpl::RunImpl(std::shared_ptr<RuntimeContext> ctx, std::string id, RunOptions options,
                 bool resumed, std::string resume_warning)
    : ctx_(std::move(ctx)),
      id_(std::move(id)),
      options_(std::move(options)),
      resumed_(resumed),
      resume_warning_(std::move(resume_warning)),
      t0_(Clock::now()),
      inbox_(std::make_shared<Inbox>()) {
  inbox_->wake = ctx_->wake;
}

RunImpl::~RunImpl() {
  std::lock_guard<std::mutex> lock(mu_);
  CancelLocked();
}

double RunImpl::NowMs() const {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
}

void RunImpl::Notify() {
  changed_.notify_all();
  ctx_->wake->Raise();
}

void RunImpl::Watch(RunWatcher watcher) {
  std::lock_guard<std::mutex> lock(watch_->mu);
  watch_->fn = std::move(watcher);
}

void RunImpl::LogEvent(const std::string& kind, const DagNode& n, const std::string& detail) {
  // Watchers hear starts, finishes and failures; a node moved off an engine
  // that died (node_moved) runs on elsewhere and is only recorded.
  if (kind == "node_started" || kind == "node_finished" || kind == "node_failed") {
    const RunEvent::Kind k = kind == "node_started"    ? RunEvent::Kind::kNodeStarted
                             : kind == "node_finished" ? RunEvent::Kind::kNodeFinished
                                                       : RunEvent::Kind::kNodeFailed;
    watch_->Emit({k, n.id, 0, detail, n.label, n.start_ms, n.end_ms});
  }
  if (!ctx_->store) return;
  nlohmann::json j = {{"node", n.id},
                      {"label", n.label},
                      {"engine", n.engine},
                      {"prompt_tokens", n.prompt_tokens},
                      {"cached_tokens", n.cached_tokens},
                      {"generated_tokens", n.generated_tokens},
                      {"run_ms", n.run_ms},
                      {"start_ms", n.start_ms},
                      {"end_ms", n.end_ms}};
  if (n.latest_finish_ms) {
    j["deadline_ms"] = *n.latest_finish_ms;
    j["slack_ms"] = n.slack_ms;
    if (n.state == NodeState::kDone) j["deadline_met"] = n.end_ms <= *n.latest_finish_ms;
  }
  if (!n.read_before.empty()) j["read_before"] = n.read_before;
  if (!detail.empty()) j["detail"] = detail;
  (void)ctx_->store->AppendEvent(id_, kind, j.dump());
}

Status RunImpl::CheckArg(const Arg& a, const std::string& what) const {
  if (a.var != 0 && !dag_.HasVar(a.var))
    return Status::InvalidArgument("unknown variable " + std::to_string(a.var) + " for " + what);
  return Status::Ok();
}

const std::string& RunImpl::ArgValue(const Arg& a) const { return a.var ? dag_.var(a.var).value : a.text; }

Result<std::vector<PromptPiece>> RunImpl::Render(const DagNode& n, int output,
                                                 const std::map<std::string, std::string>& values,
                                                 size_t bytes) const {
  // Only the template's literal text may hold special tokens; inputs and the
  // outputs generated so far are plain text, so that a document cannot forge
  // a chat turn.
  std::vector<PromptPiece> out;
  auto append = [&](const std::string& text, bool allow_special) {
    bytes += text.size();
    if (bytes > options_.max_value_bytes) return false;
    AppendPiece(out, text, allow_special);
    return true;
  };
  for (const auto& p : n.fn->pieces()) {
    bool ok = true;
    if (p.kind == SemanticFunction::Piece::Kind::kText) {
      ok = append(p.text, /*allow_special=*/true);
    } else if (p.kind == SemanticFunction::Piece::Kind::kInput) {
      ok = append(ArgValue(n.args.at(p.text)), /*allow_special=*/false);
    } else {
      if (p.output >= output) break;
      auto it = values.find(p.text);
      if (it != values.end()) ok = append(it->second, /*allow_special=*/false);
    }
    if (!ok)
      return Status::OutOfRange("the rendered prompt is more than " + std::to_string(options_.max_value_bytes) +
                                " bytes (RunOptions::max_value_bytes)");
  }
  return out;
}

Result<std::vector<ChatMessage>> RunImpl::RenderMessages(const DagNode& n, size_t* bytes) const {
  // Message contents are plain text, their literal parts included: FormatChat
  // marks them up, and only its markup yields special tokens.
  const FunctionSpec& spec = n.fn->spec();
  std::vector<ChatMessage> out;
  *bytes = spec.system.size();
  if (!spec.system.empty()) out.push_back({"system", spec.system});
  for (size_t i = 0; i < spec.messages.size(); ++i) {
    ChatMessage m{spec.messages[i].role, ""};
    for (const auto& p : n.fn->message_pieces()[i]) {
      const std::string& part =
          p.kind == SemanticFunction::Piece::Kind::kInput ? ArgValue(n.args.at(p.text)) : p.text;
      *bytes += part.size();
      if (*bytes > options_.max_value_bytes) break;
      m.content += part;
    }
    out.push_back(std::move(m));
  }
  if (*bytes > options_.max_value_bytes)
    return Status::OutOfRange("the rendered prompt is more than " +
                              std::to_string(options_.max_value_bytes) +
                              " bytes (RunOptions::max_value_bytes)");
  return out;
}

// "path#index#function#hash": FNV-1a 64 over the inputs' names and values.
std::string RunImpl::CallKeyString(const DagNode& n) const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  for (const auto& name : n.fn->inputs()) {
    mix(name);
    mix(ArgValue(n.args.at(name)));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return n.key.path + "#" + std::to_string(n.key.index) + "#" + n.fn->spec().name + "#" + hex;
}

Result<std::map<std::string, VarId>> RunImpl::Call(const SemanticFunction& fn,
                                                   const std::map<std::string, Arg>& args,
                                                   const CallKey& key,
                                                   const std::vector<VarId>& read_before) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& fname = fn.spec().name;
  for (const auto& in : fn.inputs())
    if (!args.count(in)) return Status::InvalidArgument(fname + ": missing input '" + in + "'");
  for (const auto& [name, arg] : args) {
    if (std::find(fn.inputs().begin(), fn.inputs().end(), name) == fn.inputs().end())
      return Status::InvalidArgument(fname + ": unknown input '" + name + "'");
    BRAID_RETURN_IF_ERROR(CheckArg(arg, "input '" + name + "' of " + fname));
  }
  DagNode node;
  node.kind = DagNode::Kind::kCall;
  node.label = fname.empty() ? "call" : fname;
  node.fn = std::make_shared<SemanticFunction>(fn);
  node.args = args;
  node.key = key;
  for (const auto& in : fn.inputs())
    if (VarId v = args.at(in).var) node.inputs.push_back(v);
  for (VarId v : read_before) {
    if (!dag_.HasVar(v))
      return Status::InvalidArgument(fname + ": unknown variable " + std::to_string(v) +
                                     " read before the call");
    if (dag_.var(v).state != VarState::kReady)
      return Status::InvalidArgument(fname + ": variable '" + dag_.var(v).name +
                                     "' is read before the call but is not ready");
  }
  // Edges already implied by the inputs are left out.
  std::vector<VarId> candidates = node.inputs;
  candidates.insert(candidates.end(), read_before.begin(), read_before.end());
  for (VarId v : dag_.LatestOf(candidates))
    if (std::find(node.inputs.begin(), node.inputs.end(), v) == node.inputs.end())
      node.read_before.push_back(v);
  const NodeId id = dag_.AddNode(std::move(node));
  std::map<std::string, VarId> outs;
  for (const auto& o : fn.outputs()) {
    VarId v = dag_.AddVar(o.name, id);
    dag_.AttachOutput(id, v);
    outs[o.name] = v;
  }
  // Resume: a recorded call with the same key returns its values, runs
  // nothing. (Calls whose inputs are still pending are checked again when
  // they become ready, in Schedule.)
  ReplayFromStore(id);
  Notify();
  return outs;
}

bool RunImpl::ReplayFromStore(NodeId id) {
  DagNode& n = dag_.node(id);
  if (!resumed_ || !ctx_->store || n.kind != DagNode::Kind::kCall || n.Finished()) return false;
  for (VarId v : n.inputs)
    if (dag_.var(v).state != VarState::kReady) return false;
  auto found = ctx_->store->FindCall(id_, CallKeyString(n));
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

std::vector<VarId> RunImpl::LatestOf(const std::vector<VarId>& vars) const {
  std::lock_guard<std::mutex> lock(mu_);
  return dag_.LatestOf(vars);
}

VarId RunImpl::Literal(std::string value, std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  VarId v = dag_.AddVar(std::move(name), 0);
  dag_.var(v).value = std::move(value);
  dag_.var(v).state = VarState::kReady;
  return v;
}

Result<VarId> RunImpl::Join(const std::vector<Arg>& parts, std::string sep) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < parts.size(); ++i)
    BRAID_RETURN_IF_ERROR(CheckArg(parts[i], "part " + std::to_string(i + 1) + " of a join"));
  DagNode node;
  node.kind = DagNode::Kind::kJoin;
  node.label = "join";
  node.parts = parts;
  node.sep = std::move(sep);
  for (const auto& p : parts)
    if (p.var) node.inputs.push_back(p.var);
  const NodeId id = dag_.AddNode(std::move(node));
  VarId v = dag_.AddVar("join" + std::to_string(id), id);
  dag_.AttachOutput(id, v);
  Notify();
  return v;
}

VarId RunImpl::HostVar(std::string name, const std::vector<VarId>& depends_on, std::string label) {
  std::lock_guard<std::mutex> lock(mu_);
  DagNode node;
  node.kind = DagNode::Kind::kHost;
  node.label = std::move(label);
  std::string bad;
  for (VarId d : depends_on) {
    if (dag_.HasVar(d))
      node.inputs.push_back(d);
    else
      bad += (bad.empty() ? "" : ", ") + std::to_string(d);
  }
  const NodeId id = dag_.AddNode(std::move(node));
  VarId v = dag_.AddVar(std::move(name), id);
  dag_.AttachOutput(id, v);
  // HostVar cannot return an error: an unknown dependency fails the variable.
  if (!bad.empty())
    FailNode(id, "unknown variable " + bad + " in depends_on of '" + dag_.var(v).name + "'");
  return v;
}

Status RunImpl::AddDependency(VarId host_var, VarId dep) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dag_.HasVar(host_var))
    return Status::InvalidArgument("unknown variable " + std::to_string(host_var));
  if (!dag_.HasVar(dep)) return Status::InvalidArgument("unknown variable " + std::to_string(dep));
  const NodeId n = dag_.var(host_var).producer;
  if (!n || dag_.node(n).kind != DagNode::Kind::kHost || dag_.node(n).Finished())
    return Status::InvalidArgument("variable '" + dag_.var(host_var).name +
                                   "' is not a pending host variable");
  BRAID_RETURN_IF_ERROR(dag_.AddInput(n, dep));
  Notify();
  return Status::Ok();
}

Status RunImpl::SetValue(VarId var, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dag_.HasVar(var)) return Status::InvalidArgument("unknown variable " + std::to_string(var));
  DagVar& v = dag_.var(var);
  const NodeId n = v.producer;
  if (!n || dag_.node(n).kind != DagNode::Kind::kHost)
    return Status::InvalidArgument("variable '" + v.name + "' is not a host variable");
  if (v.state != VarState::kPending)
    return Status::InvalidArgument("variable '" + v.name + "' is already " + VarStateName(v.state));
  if (ctx_->store)
    (void)ctx_->store->AppendEvent(id_, "host_value", nlohmann::json{{"var", var}}.dump());
  v.value = std::move(value);
  v.state = VarState::kReady;
  dag_.node(n).state = NodeState::kDone;
  Notify();
  return Status::Ok();
}

Status RunImpl::SetFailed(VarId var, std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dag_.HasVar(var)) return Status::InvalidArgument("unknown variable " + std::to_string(var));
  DagVar& v = dag_.var(var);
  const NodeId n = v.producer;
  if (!n || dag_.node(n).kind != DagNode::Kind::kHost)
    return Status::InvalidArgument("variable '" + v.name + "' is not a host variable");
  if (v.state != VarState::kPending)
    return Status::InvalidArgument("variable '" + v.name + "' is already " + VarStateName(v.state));
  FailNode(n, error);
  return Status::Ok();
}

double RunImpl::EstimateVarTokens(VarId id) {
  DagVar& v = dag_.var(id);
  if (v.state == VarState::kReady) {
    if (v.token_estimate < 0)
      v.token_estimate = static_cast<int>(model().TokenizeText(v.value).size());
    return v.token_estimate;
  }
  if (!v.producer) return 0;
  const DagNode& p = dag_.node(v.producer);
  if (p.kind == DagNode::Kind::kCall) {
    for (const auto& o : p.fn->outputs())
      if (o.name == v.name) return o.kind == OutputSpec::Kind::kSelect ? 4 : o.max_tokens;
    return 0;
  }
  if (p.kind == DagNode::Kind::kJoin) {
    double t = 0;
    for (const auto& part : p.parts)
      t += part.var ? EstimateVarTokens(part.var) : model().TokenizeText(part.text).size();
    return t;
  }
  return 0;
}

double RunImpl::CostMs(const DagNode& n, const CostModel& rates) {
  if (n.kind != DagNode::Kind::kCall) return 0;
  auto [it, fresh] = literal_tokens_.emplace(n.fn.get(), 0.0);
  if (fresh) {
    std::vector<PromptPiece> literal;
    for (const auto& p : n.fn->pieces())
      if (p.kind == SemanticFunction::Piece::Kind::kText) AppendPiece(literal, p.text, true);
    if (n.fn->chat()) {
      // The turns without their inputs, through the chat template: its
      // markup is part of every prompt of the function.
      std::vector<ChatMessage> turns;
      if (!n.fn->spec().system.empty()) turns.push_back({"system", n.fn->spec().system});
      for (size_t i = 0; i < n.fn->spec().messages.size(); ++i) {
        turns.push_back({n.fn->spec().messages[i].role, ""});
        for (const auto& p : n.fn->message_pieces()[i])
          if (p.kind == SemanticFunction::Piece::Kind::kText) turns.back().content += p.text;
      }
      turns.push_back({"user", JoinPieces(literal)});
      literal = model().FormatChat(turns, /*add_generation_prompt=*/true);
    }
    it->second = static_cast<double>(model().Tokenize(literal).size());
  }
  double prompt = it->second, gen = 0;
  auto add_inputs = [&](const std::vector<SemanticFunction::Piece>& pieces) {
    for (const auto& p : pieces) {
      if (p.kind != SemanticFunction::Piece::Kind::kInput) continue;
      const Arg& a = n.args.at(p.text);
      prompt += a.var ? EstimateVarTokens(a.var)
                      : static_cast<double>(model().TokenizeText(a.text).size());
    }
  };
  for (const auto& pieces : n.fn->message_pieces()) add_inputs(pieces);
  add_inputs(n.fn->pieces());
  for (const auto& o : n.fn->outputs())
    gen += o.kind == OutputSpec::Kind::kSelect ? 0 : o.max_tokens;
  return rates.CostMs(prompt, gen);
}

Status RunImpl::Want(VarId var, const GetOptions& options) {
  // DAG mode: the program runs inside the runtime, so the client pays one
  // round trip for the whole run (submitting it and reading the result), not
  // one per call or per get. It is charged at the first Want.
  if (dag_mode() && options_.rtt_ms > 0 && !rtt_paid_.exchange(true))
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.rtt_ms));
  std::lock_guard<std::mutex> lock(mu_);
  if (!dag_.HasVar(var)) return Status::InvalidArgument("unknown variable " + std::to_string(var));
  if (options.deadline_ms && !(*options.deadline_ms >= 0))
    return Status::InvalidArgument("deadline_ms must be >= 0");
  const CostModel rates = ctx_->Rates();
  DeductionParams params;
  params.now_ms = NowMs();
  params.cost_ms = [&](const DagNode& n) { return CostMs(n, rates); };
  params.groups = dag_mode();
  params.goals = dag_mode();
  params.next_group = &next_group_;
  BRAID_RETURN_IF_ERROR(DeduceGoals(dag_, var, options, params));
  PushGoals();
  Notify();
  return Status::Ok();
}

VarState RunImpl::state(VarId var) const {
  std::lock_guard<std::mutex> lock(mu_);
  return dag_.HasVar(var) ? dag_.var(var).state : VarState::kFailed;
}

std::string RunImpl::value(VarId var) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dag_.HasVar(var) || dag_.var(var).state != VarState::kReady) return "";
  return dag_.var(var).value;
}

std::string RunImpl::error(VarId var) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dag_.HasVar(var)) return "unknown variable " + std::to_string(var);
  const DagVar& v = dag_.var(var);
  return v.state == VarState::kFailed || v.state == VarState::kCancelled ? v.error : "";
}

Result<ChoiceScores> RunImpl::scores(VarId var) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dag_.HasVar(var)) return Status::InvalidArgument("unknown variable " + std::to_string(var));
  const DagVar& v = dag_.var(var);
  bool select = false;
  if (v.producer && dag_.node(v.producer).kind == DagNode::Kind::kCall)
    for (const auto& o : dag_.node(v.producer).fn->outputs())
      select |= o.name == v.name && o.kind == OutputSpec::Kind::kSelect;
  if (!select) return Status::InvalidArgument("'" + v.name + "' is not a select output");
  if (v.state != VarState::kReady)
    return Status::NotFound("'" + v.name + "' is " + VarStateName(v.state) + ", not ready");
  if (v.scores.empty())
    return Status::NotFound(
        "the scores of '" + v.name +
        "' were not recorded (the call was replayed from a record without them)");
  return v.scores;
}

void RunImpl::WaitAny(const std::vector<VarId>& vars, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto any = [&] {
    for (VarId v : vars)
      if (!dag_.HasVar(v) || dag_.var(v).state != VarState::kPending) return true;
    return vars.empty();
  };
  if (timeout_ms < 0)
    changed_.wait(lock, any);
  else
    changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), any);
}

bool RunImpl::SettlesLocked(VarId id, std::vector<uint8_t>& memo) const {
  if (!dag_.HasVar(id)) return true;  // reads as failed
  const DagVar& v = dag_.var(id);
  if (v.state != VarState::kPending) return true;
  if (!v.producer) return false;
  uint8_t& m = memo[v.producer];
  if (m == 1 || m == 2) return m == 1;
  if (m == 3) return false;  // a cycle cannot settle
  m = 3;
  const DagNode& n = dag_.node(v.producer);
  bool ok = n.state == NodeState::kRunning || n.state == NodeState::kReady;
  if (!ok && Runnable(n)) {
    ok = true;
    for (VarId in : n.inputs) ok = ok && SettlesLocked(in, memo);
  }
  memo[v.producer] = ok ? 1 : 2;
  return ok;
}

bool RunImpl::AnySettles(const std::vector<VarId>& vars) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint8_t> memo(dag_.num_nodes() + 1);
  for (VarId v : vars)
    if (SettlesLocked(v, memo)) return true;
  return false;
}

std::vector<NodeInfo> RunImpl::Outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint8_t> memo(dag_.num_nodes() + 1);
  std::vector<NodeInfo> out;
  for (size_t i = 1; i <= dag_.num_nodes(); ++i) {
    const DagNode& n = dag_.node(i);
    if (n.Finished() || n.outputs.empty() || n.kind == DagNode::Kind::kHost) continue;
    if (SettlesLocked(n.outputs[0], memo)) out.push_back(InfoLocked(n));
  }
  return out;
}

std::string RunImpl::Replayable(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_->store) {
    if (resumed_) {
      auto found = ctx_->store->FindValue(id_, key);
      if (found.ok() && found.value()) return *found.value();
    }
    (void)ctx_->store->RecordValue(id_, key, value);
    return value;
  }
  auto [it, fresh] = replay_.emplace(key, value);
  return it->second;
}

NodeInfo RunImpl::InfoLocked(const DagNode& n) const {
  NodeInfo info;
  info.id = n.id;
  info.label = n.label;
  info.call = n.kind == DagNode::Kind::kCall;
  info.state = n.state;
  info.inputs = n.inputs;
  info.outputs = n.outputs;
  info.wanted = n.wanted;
  info.goal = n.goal;
  info.group = n.group;
  info.slack_ms = n.slack_ms;
  info.priority = n.priority;
  info.deadline_ms = n.latest_finish_ms;
  if (n.latest_finish_ms && n.state == NodeState::kDone && n.end_ms >= 0)
    info.deadline_met = n.end_ms <= *n.latest_finish_ms;
  else if (n.latest_finish_ms && n.state == NodeState::kFailed)
    info.deadline_met = false;
  info.read_before = n.read_before;
  info.start_ms = n.start_ms;
  info.end_ms = n.end_ms;
  info.engine = n.engine;
  info.prompt_tokens = n.prompt_tokens;
  info.cached_tokens = n.cached_tokens;
  info.generated_tokens = n.generated_tokens;
  info.queued_ms = n.queued_ms;
  info.run_ms = n.run_ms;
  if (n.state == NodeState::kRunning) {
    // Live figures: tokens streamed by its requests in flight, time since it started.
    for (const auto& [fid, f] : flights_)
      if (f.node == n.id) info.generated_tokens += f.live_tokens->load(std::memory_order_relaxed);
    if (auto e = exec_.find(n.id); e != exec_.end() && e->second.submitted_once)
      info.run_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - e->second.started).count();
  }
  info.first_token_ms = n.first_token_ms;
  if (n.kind == DagNode::Kind::kCall) {
    info.scored = true;
    for (const auto& o : n.fn->outputs())
      info.scored = info.scored && o.kind == OutputSpec::Kind::kSelect;
  }
  if (n.first_token_ms >= 0 && info.generated_tokens > 1) {
    const double until = n.end_ms >= 0 ? n.end_ms : NowMs();
    if (until > n.first_token_ms)
      info.decode_tokens_per_s = (info.generated_tokens - 1) * 1000.0 / (until - n.first_token_ms);
  }
  info.error = n.error;
  info.warning = n.warning;
  return info;
}

std::vector<NodeInfo> RunImpl::Nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NodeInfo> out;
  for (size_t i = 1; i <= dag_.num_nodes(); ++i) out.push_back(InfoLocked(dag_.node(i)));
  return out;
}

std::vector<VarInfo> RunImpl::Vars() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<VarInfo> out;
  for (size_t i = 1; i <= dag_.num_vars(); ++i) {
    const DagVar& v = dag_.var(i);
    VarInfo info;
    info.id = v.id;
    info.name = v.name;
    info.state = v.state;
    // Per the contract, host-set variables report no producer.
    info.producer =
        v.producer && dag_.node(v.producer).kind != DagNode::Kind::kHost ? v.producer : 0;
    info.consumers = v.consumers;
    info.readers = v.readers;
    if (v.state == VarState::kReady)
      info.value = v.value;
    else
      info.error = v.error;
    info.scores = v.scores;  // set only once ready
    out.push_back(std::move(info));
  }
  return out;
}

namespace {
std::string DotEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
const char* DotColor(NodeState s) {
  switch (s) {
    case NodeState::kWaiting:
    case NodeState::kReady:
      return "lightgrey";
    case NodeState::kRunning:
      return "yellow";
    case NodeState::kDone:
      return "palegreen";
    case NodeState::kFailed:
      return "tomato";
    case NodeState::kCancelled:
      return "white";
  }
  return "white";
}
// At most `max` bytes of `s` (cut at a UTF-8 boundary), "..." when cut.
std::string Truncate(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

}  // namespace

// "TB" when the DAG is deeper than it is wide, else "LR". Depth: the nodes
// on its longest path; width: the most nodes at one depth. A node box is
// several times wider than tall, so a chain drawn left to right runs far
// off a screen while top to bottom it fits, and a wide fan-in the other way.
std::string RunImpl::RankDirLocked() const {
  const size_t n = dag_.num_nodes();
  // Each node's successors (inputs and read-before edges), and how many
  // predecessors are not placed yet (Kahn's order).
  std::vector<std::vector<NodeId>> next(n + 1);
  std::vector<int> preds(n + 1, 0);
  for (size_t i = 1; i <= dag_.num_vars(); ++i) {
    const DagVar& v = dag_.var(i);
    if (!v.producer) continue;
    for (const auto* list : {&v.consumers, &v.readers})
      for (NodeId c : *list) {
        next[v.producer].push_back(c);
        ++preds[c];
      }
  }
  std::vector<int> level(n + 1, 0);  // 0-based depth of each node
  std::vector<NodeId> ready;
  for (NodeId id = 1; id <= n; ++id)
    if (preds[id] == 0) ready.push_back(id);
  int depth = 0;
  while (!ready.empty()) {
    const NodeId id = ready.back();
    ready.pop_back();
    depth = std::max(depth, level[id] + 1);
    for (NodeId c : next[id]) {
      level[c] = std::max(level[c], level[id] + 1);
      if (--preds[c] == 0) ready.push_back(c);
    }
  }
  std::vector<int> at_level(static_cast<size_t>(depth) + 1, 0);
  int width = 0;
  for (NodeId id = 1; id <= n; ++id) width = std::max(width, ++at_level[level[id]]);
  return depth > width ? "TB" : "LR";
}

std::string RunImpl::ToDot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  o << "digraph \"" << DotEscape(id_) << "\" {\n  rankdir=" << RankDirLocked()
    << ";\n  node [shape=box, style=filled, fontname=\"Helvetica\"];\n";
  char buf[96];
  for (size_t i = 1; i <= dag_.num_nodes(); ++i) {
    const DagNode& n = dag_.node(i);
    std::ostringstream label;
    label << n.Name() << "\n" << NodeStateName(n.state);
    if (n.wanted) label << (n.goal == Criteria::kLatency ? ", latency" : ", throughput");
    if (n.group) label << ", group " << n.group;
    if (n.kind == DagNode::Kind::kCall && (n.prompt_tokens || n.generated_tokens))
      label << "\n"
            << n.prompt_tokens << " in (" << n.cached_tokens << " cached), " << n.generated_tokens
            << " out";
    if (n.start_ms >= 0) {
      std::snprintf(buf, sizeof buf, "\n%.0f-%s ms", n.start_ms,
                    n.end_ms >= 0 ? std::to_string(static_cast<long>(n.end_ms)).c_str() : "");
      label << buf << (n.engine.empty() ? "" : " on " + n.engine);
    }
    if (n.latest_finish_ms) {
      const bool done = n.state == NodeState::kDone && n.end_ms >= 0;
      std::snprintf(buf, sizeof buf, "\ndeadline %.0f ms%s", *n.latest_finish_ms,
                    !done                             ? ""
                    : n.end_ms <= *n.latest_finish_ms ? ", met"
                                                      : ", MISSED");
      label << buf;
    }
    if (n.state == NodeState::kDone && n.kind == DagNode::Kind::kCall)
      for (VarId v : n.outputs) {
        const DagVar& var = dag_.var(v);
        label << "\n" << var.name << " = " << Truncate(var.value, 40);
        for (size_t k = 0; k < var.scores.size(); ++k) {  // select: every choice's score
          std::snprintf(buf, sizeof buf, "%s%s %.2f", k ? ", " : " (",
                        Truncate(var.scores[k].first, 24).c_str(), var.scores[k].second);
          label << buf << (k + 1 == var.scores.size() ? ")" : "");
        }
      }
    if (n.state == NodeState::kFailed) label << "\n" << Truncate(n.error, 60);
    o << "  n" << n.id << " [label=\"" << DotEscape(label.str())
      << "\", fillcolor=" << DotColor(n.state) << (n.wanted ? "" : ", style=\"filled,dashed\"")
      << "];\n";
  }
  // Inputs as solid edges; values the program read before a call as dashed ones.
  for (size_t i = 1; i <= dag_.num_vars(); ++i) {
    const DagVar& v = dag_.var(i);
    if (!v.producer) continue;
    for (NodeId c : v.consumers)
      o << "  n" << v.producer << " -> n" << c << " [label=\"" << DotEscape(v.name) << "\"];\n";
    for (NodeId r : v.readers)
      o << "  n" << v.producer << " -> n" << r << " [style=dashed, label=\"read "
        << DotEscape(v.name) << "\"];\n";
  }
  o << "}\n";
  return o.str();
}

void RunImpl::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  CancelLocked();
  Notify();
}

Result<int> RunImpl::BeginAttempt() {
  if (!ctx_->store) return Status::Unsupported("the runtime has no run store");
  return ctx_->store->AddAttempt(id_);  // the store's own lock: none of ours held
}

void RunImpl::Finish(const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  DropKept();
  const char* state = status.ok()                               ? "done"
                      : status.code() == StatusCode::kCancelled ? "cancelled"
                                                                : "failed";
  if (ctx_->store) (void)ctx_->store->FinishRun(id_, state, status.ok() ? "" : status.message());
  Notify();
}

}  // namespace braid::rt
