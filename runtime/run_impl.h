// The Run implementation: the DAG of one program run, goal deduction at each
// Want, and its execution, pumped by the Runtime's dispatcher thread.
//
// Locking: mu_ guards everything but the inbox. Program-thread calls and
// Pump (dispatcher thread) take mu_; engine callbacks only append to the
// inbox (its own mutex) and raise the wake signal, so they never block on a
// Pump in progress.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "exec/dispatcher.h"
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
  std::string Replayable(const std::string& key, const std::string& value) override;
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
  struct Event {
    uint64_t flight = 0;
    bool finished = false;  // else: the first token arrived
  };
  struct Inbox {
    std::mutex mu;
    std::vector<Event> events;
    std::shared_ptr<WakeSignal> wake;
  };
  // Execution progress of one call node.
  struct Exec {
    int output = 0;                             // output being generated
    std::map<std::string, std::string> values;  // outputs generated so far
    std::map<std::string, ChoiceScores> scores;  // select outputs so far: their choices' scores
    // The select being scored: its choices' token counts, and with the
    // unconditional scoring the first pass's sums while the second (after
    // no prompt) runs.
    std::vector<size_t> choice_tokens;
    std::optional<std::vector<double>> conditional;
    std::vector<PromptPiece> prompt_pieces;     // the text of `prompt`
    std::vector<int32_t> prompt;                // current segment (empty = not rendered)
    int engine = -1;
    Clock::time_point ready_since{}, started{};
    bool submitted_once = false;
    std::optional<Clock::time_point> send_at, done_at;  // baseline round trips
    uint64_t wait_leader = 0;                           // follower of this flight's prefix
    int moves = 0;  // times it was moved off an engine that died
  };
  // One request in an engine.
  struct Flight {
    NodeId node = 0;
    int engine = 0;
    std::shared_ptr<RequestHandle> handle;
    bool admitted = false;          // first token (or the end) seen
    std::vector<NodeId> followers;  // leader: nodes waiting for its prefix
    std::vector<int32_t> prefix;    // leader: the shared prefix
    uint64_t share = 0;             // follower: its leader's flight id
    // The goal the engine has for it (Want may raise it: PushGoals).
    Criteria goal = Criteria::kThroughput;
    int priority = 0;
    std::optional<double> latest_finish_ms;
    // Tokens streamed so far (the engine's callback counts them; Nodes reads
    // them for running nodes, before the completion's usage arrives).
    std::shared_ptr<std::atomic<int>> live_tokens = std::make_shared<std::atomic<int>>(0);
    // Kept contexts this request extends: their expectations (held when
    // pinning), on their engines, are released once it is admitted (it then
    // holds the prefix itself).
    struct Hold {
      int engine = 0;
      uint64_t hint = 0;  // Engine::ExpectUse
    };
    std::vector<Hold> holds;
  };
  // A finished call's context kept for the call that extends it
  // (RetentionOptions); oldest first in kept_.
  struct Kept {
    int engine = 0;
    std::vector<int32_t> tokens;  // its prompt and output
    std::string fn;               // its function, as the GapModel knows it
    Clock::time_point finished{}, expires{};
    Flight::Hold hold;      // pin and expectation while kept (0: none)
    bool extended = false;  // a later call of the run extends it
  };
  static constexpr size_t kMaxKept = 8;
  // The watcher, shared with the engine callbacks of this run's requests.
  struct WatchSlot {
    std::mutex mu;
    RunWatcher fn;
    void Emit(const RunEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (fn) fn(e);
    }
  };
  struct Share {
    int engine = 0;
    uint64_t pin = 0;
    int pending = 0;  // followers not admitted yet
  };

  double NowMs() const;
  bool dag_mode() const { return options_.mode == Mode::kDag; }
  const Model& model() const { return *ctx_->tokenizer; }
  Status CheckArg(const Arg& a, const std::string& what) const;
  const std::string& ArgValue(const Arg& a) const;
  // The prompt of `output` of a call: template literals as allow_special
  // pieces, inputs and earlier outputs as plain pieces. `bytes` already
  // rendered (the messages) count against RunOptions::max_value_bytes.
  Result<std::vector<PromptPiece>> Render(const DagNode& n, int output,
                                          const std::map<std::string, std::string>& values,
                                          size_t bytes = 0) const;
  // The turns before the prompt of a chat-style call: its system text, then
  // its messages with their inputs substituted; *bytes is their size.
  Result<std::vector<ChatMessage>> RenderMessages(const DagNode& n, size_t* bytes) const;
  std::string CallKeyString(const DagNode& n) const;
  std::atomic<bool> rtt_paid_{false};  // DAG mode: the run's one client round trip
  // Completes call `id` from the store when this run is a resumption that
  // recorded it (inputs ready, every output present). Holds mu_.
  bool ReplayFromStore(NodeId id);
  double EstimateVarTokens(VarId v);
  double CostMs(const DagNode& n, const CostModel& rates);
  void Notify();
  void LogEvent(const std::string& kind, const DagNode& n, const std::string& detail = "");

  // -- execution (mu_ held) --
  void HandleEvent(const Event& ev);
  void OnAdmitted(uint64_t flight_id);
  void OnSegmentDone(NodeId n, const Completion& c);
  // Resubmits `n` elsewhere when `c` failed on `engine` and that engine is
  // not alive (at most kMaxMoves times); true when it took care of `c`.
  bool MoveFromDeadEngine(NodeId n, int engine, const Completion& c);
  void Schedule(Clock::time_point now);
  Status Prepare(NodeId n);
  Status Submit(NodeId n, int engine, uint64_t* flight_id);
  // A select's scoring request: the prompt to score after (the part of
  // `prompt` every choice's tokens share) and each choice's tokens.
  std::pair<std::vector<int32_t>, std::vector<std::vector<int32_t>>> ChoiceTokens(
      const std::vector<int32_t>& prompt, const std::vector<PromptPiece>& pieces,
      const std::vector<std::string>& choices) const;
  void SubmitOrFail(NodeId n, int engine, uint64_t* flight_id = nullptr);
  void CompleteNode(NodeId n);
  void RunJoin(NodeId n);
  void FailNode(NodeId n, const std::string& cause, bool cancelled = false, bool inherited = false);
  void SetVarFailed(VarId v, const std::string& message, bool cancelled);
  void CancelLocked();
  bool FollowInFlight(NodeId n);
  // Settles with a memo (0 unknown, 1 yes, 2 no, 3 in progress).
  bool SettlesLocked(VarId var, std::vector<uint8_t>& memo) const;
  NodeInfo InfoLocked(const DagNode& n) const;
  // The graph's rankdir for ToDot: "TB" for a DAG deeper than wide, else "LR".
  std::string RankDirLocked() const;
  // Sends goal changes made by a Want to the requests already in engines.
  void PushGoals();
  // Eager calls (and joins) run when their inputs are ready; lazy calls only
  // once wanted.
  bool Runnable(const DagNode& n) const;
  // -- kept contexts (mu_ held) --
  bool retaining() const { return dag_mode() && ctx_->gaps != nullptr; }
  // The function's key in the GapModel: its name within this program.
  std::string GapKey(const DagNode& n) const;
  // Keeps the context of call `n`, finished on `engine`, as the GapModel advises.
  void Keep(NodeId n, int engine, std::vector<int32_t> context);
  // Marks the kept contexts `prompt` extends and moves their holds to `f`.
  void MatchKept(const std::vector<int32_t>& prompt, Flight* f);
  void Release(const Flight::Hold& hold);
  // Releases the holds whose time-to-live passed; *next: the next expiry.
  void ExpireKept(Clock::time_point now, std::optional<Clock::time_point>* next);
  // The run is over: releases every hold and tells the GapModel which
  // contexts no call extended.
  void DropKept();

  const std::shared_ptr<RuntimeContext> ctx_;
  const std::string id_;
  const RunOptions options_;
  const bool resumed_;
  const std::string resume_warning_;
  const Clock::time_point t0_;
  std::shared_ptr<Inbox> inbox_;
  const std::shared_ptr<WatchSlot> watch_ = std::make_shared<WatchSlot>();

  mutable std::mutex mu_;
  std::condition_variable changed_;
  Dag dag_;
  int next_group_ = 0;
  uint64_t next_flight_ = 0;
  std::map<NodeId, Exec> exec_;
  std::map<uint64_t, Flight> flights_;
  std::map<uint64_t, Share> shares_;
  std::vector<Kept> kept_;
  std::map<const SemanticFunction*, double> literal_tokens_;
  std::map<std::string, std::string> replay_;  // Replayable without a store
  bool cancelled_ = false, finished_ = false, shutdown_ = false;
};

}  // namespace braid::rt
