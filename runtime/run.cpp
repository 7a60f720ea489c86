// A Run's program-thread side: building the DAG (calls, literals, joins,
// host variables), values and waiting, and its life (pumping, cancelling,
// finishing). Goals are in run_goals.cpp, views in run_view.cpp; execution
// is the Executor's (exec/executor.h).
#include <algorithm>

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
      events_(std::make_shared<RunEvents>(ctx_->store, id_)),
      executor_({ctx_, id_, &options_, resumed_, t0_, &dag_, &changed_, events_}) {}

RunImpl::~RunImpl() {
  std::lock_guard<std::mutex> lock(mu_);
  executor_.Cancel();
  cancelled_ = true;
}

void RunImpl::Notify() {
  changed_.notify_all();
  ctx_->wake->Raise();
}

void RunImpl::Watch(RunWatcher watcher) { events_->Watch(std::move(watcher)); }

std::optional<Clock::time_point> RunImpl::Pump() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_ || shutdown_) return std::nullopt;
  return executor_.Pump();
}

bool RunImpl::Closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return (cancelled_ || finished_ || shutdown_) && executor_.Idle();
}

void RunImpl::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  executor_.Cancel();
  cancelled_ = true;
  changed_.notify_all();
}

void RunImpl::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  executor_.Cancel();
  cancelled_ = true;
  Notify();
}

Result<int> RunImpl::BeginAttempt() {
  if (!ctx_->store) return Status::Unsupported("the runtime has no run store");
  return ctx_->store->AddAttempt(id_);  // the store's own lock: none of ours held
}

void RunImpl::Finish(const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  executor_.End();
  const char* state = status.ok()                               ? "done"
                      : status.code() == StatusCode::kCancelled ? "cancelled"
                                                                : "failed";
  if (ctx_->store) (void)ctx_->store->FinishRun(id_, state, status.ok() ? "" : status.message());
  Notify();
}

Status RunImpl::CheckArg(const Arg& a, const std::string& what) const {
  if (a.var != 0 && !dag_.HasVar(a.var))
    return Status::InvalidArgument("unknown variable " + std::to_string(a.var) + " for " + what);
  return Status::Ok();
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
  executor_.Replay(id);
  Notify();
  return outs;
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
    executor_.Fail(id, "unknown variable " + bad + " in depends_on of '" + dag_.var(v).name + "'");
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

Status RunImpl::CheckHostVar(VarId var) const {
  if (!dag_.HasVar(var)) return Status::InvalidArgument("unknown variable " + std::to_string(var));
  const DagVar& v = dag_.var(var);
  const NodeId n = v.producer;
  if (!n || dag_.node(n).kind != DagNode::Kind::kHost)
    return Status::InvalidArgument("variable '" + v.name + "' is not a host variable");
  if (v.state != VarState::kPending)
    return Status::InvalidArgument("variable '" + v.name + "' is already " + VarStateName(v.state));
  return Status::Ok();
}

Status RunImpl::SetValue(VarId var, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  BRAID_RETURN_IF_ERROR(CheckHostVar(var));
  events_->HostValue(var);
  DagVar& v = dag_.var(var);
  v.value = std::move(value);
  v.state = VarState::kReady;
  dag_.node(v.producer).state = NodeState::kDone;
  Notify();
  return Status::Ok();
}

Status RunImpl::SetFailed(VarId var, std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  BRAID_RETURN_IF_ERROR(CheckHostVar(var));
  executor_.Fail(dag_.var(var).producer, error);
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

std::string RunImpl::Replayable(const std::string& key, const std::string& value,
                                Durability durability) {
  std::lock_guard<std::mutex> lock(mu_);
  if (durability == Durability::kBatched && host_values_++ >= kMaxHostValues) {
    if (host_values_ == kMaxHostValues + 1 && ctx_->store) {
      (void)ctx_->store->AppendEvent(id_, "host_values_capped",
                                     "{\"recorded\": " + std::to_string(kMaxHostValues) + "}");
    }
    return value;
  }
  if (ctx_->store) {
    if (resumed_) {
      auto found = ctx_->store->FindValue(id_, key);
      if (found.ok() && found.value()) return *found.value();
    }
    if (durability == Durability::kNow)
      (void)ctx_->store->RecordValue(id_, key, value);
    else
      (void)ctx_->store->BufferValue(id_, key, value);
    return value;
  }
  auto [it, fresh] = replay_.emplace(key, value);
  return it->second;
}

}  // namespace braid::rt
