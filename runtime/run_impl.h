// The Run implementation: the DAG of one program run, built by the program's
// calls, goal deduction at each Want, and the views of it (Nodes, Vars,
// ToDot). Its calls are executed by its Executor (exec/executor.h), pumped
// by the Runtime's dispatcher thread.
//
// Files: run.cpp (building and waiting), run_goals.cpp (Want: costs and
// deduction), run_view.cpp (introspection).
//
// Locking: mu_ guards the DAG, the executor and the flags. Program-thread
// calls and Pump (dispatcher thread) take mu_; engine callbacks only append
// to the executor's inbox (its own mutex) and raise the wake signal, so
// they never block on a Pump in progress.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>

#include "exec/dispatcher.h"
#include "exec/executor.h"
#include "exec/run_events.h"
#include "graph/dag.h"

namespace braid::rt {

class RunImpl final : public Run, public Pumpable {
 public:
  RunImpl(std::shared_ptr<RuntimeContext> ctx, std::string id, RunOptions options, bool resumed,
          std::string resume_warning = "");
  ~RunImpl() override;

  const std::string& id() const override { return id_; }
  std::string resume_warning() const override { return resume_warning_; }
  Result<std::map<std::string, VarId>> Call(const SemanticFunction& fn,
                                            const std::map<std::string, Arg>& args,
                                            const CallKey& key,
                                            const std::vector<VarId>& read_before = {}) override;
  std::vector<VarId> LatestOf(const std::vector<VarId>& vars) const override;
  VarId Literal(std::string value, std::string name) override;
  Result<VarId> Join(const std::vector<Arg>& parts, std::string sep) override;
  VarId HostVar(std::string name, const std::vector<VarId>& depends_on, std::string label) override;
  Status SetValue(VarId var, std::string value) override;
  Status SetFailed(VarId var, std::string error) override;
  Status AddDependency(VarId host_var, VarId dep) override;
  Status Want(VarId var, const GetOptions& options) override;
  VarState state(VarId var) const override;
  std::string value(VarId var) const override;
  std::string error(VarId var) const override;
  Result<ChoiceScores> scores(VarId var) const override;
  void WaitAny(const std::vector<VarId>& vars, int timeout_ms) override;
  bool AnySettles(const std::vector<VarId>& vars) const override;
  std::vector<NodeInfo> Outstanding() const override;
  std::string Replayable(const std::string& key, const std::string& value,
                         Durability durability) override;
  std::vector<NodeInfo> Nodes() const override;
  std::vector<VarInfo> Vars() const override;
  std::string ToDot() const override;
  void Watch(RunWatcher watcher) override;
  void Cancel() override;
  void Finish(const Status& status) override;
  Result<int> BeginAttempt() override;

  std::optional<Clock::time_point> Pump() override;
  bool Closed() const override;
  void Shutdown() override;

 private:
  double NowMs() const { return MsSince(t0_); }
  bool dag_mode() const { return options_.mode == Mode::kDag; }
  const Model& model() const { return *ctx_->tokenizer; }
  Status CheckArg(const Arg& a, const std::string& what) const;
  void Notify();
  // Whether a host variable `var` can be set: InvalidArgument naming why not.
  Status CheckHostVar(VarId var) const;

  // -- goals (run_goals.cpp) --
  double EstimateVarTokens(VarId v);
  // The template's literal tokens of `fn` (chat markup included), counted once.
  double LiteralTokens(const SemanticFunction& fn);
  double CostMs(const DagNode& n, const CostModel& rates);

  // -- views (run_view.cpp; mu_ held) --
  // Settles with a memo (0 unknown, 1 yes, 2 no, 3 in progress).
  bool SettlesLocked(VarId var, std::vector<uint8_t>& memo) const;
  NodeInfo InfoLocked(const DagNode& n) const;
  // The graph's rankdir for ToDot: "TB" for a DAG deeper than wide, else "LR".
  std::string RankDirLocked() const;

  const std::shared_ptr<RuntimeContext> ctx_;
  const std::string id_;
  const RunOptions options_;
  const bool resumed_;
  const std::string resume_warning_;
  const Clock::time_point t0_;
  const std::shared_ptr<RunEvents> events_;
  std::atomic<bool> rtt_paid_{false};  // DAG mode: the run's one client round trip

  mutable std::mutex mu_;
  std::condition_variable changed_;
  Dag dag_;
  Executor executor_;  // after what it points to: dag_, options_, changed_
  int next_group_ = 0;
  std::map<const SemanticFunction*, double> literal_tokens_;
  std::map<std::string, std::string> replay_;  // Replayable without a store
  size_t host_values_ = 0;                     // Replayable's values read or recorded
  bool cancelled_ = false, finished_ = false, shutdown_ = false;
};

}  // namespace braid::rt
