// The executor of one run: it gets the calls of the run's DAG done on the
// engines, as the DAG grows and the program wants its values.
//
// What it does. Each Pump handles what the engines reported (first tokens,
// completions), fires the baseline's due round trips, and schedules the
// ready nodes: a node with a failed input fails, joins run at once, a
// resumed run's recorded calls replay from the store, and calls are
// rendered, tokenized, ordered (DispatchOrder), co-scheduled when their
// prompts share a long prefix (a leader first, its followers on the same
// engine once the leader's prompt is cached, the prefix pinned meanwhile),
// placed (RuntimeContext::placement) and submitted, one request per output.
// A finished call is recorded in the store before its outputs become ready;
// a failed one fails everything downstream; a request that failed on an
// engine that died moves to another. See docs/runtime.md, "Dispatch".
//
// Ownership. The run owns the DAG, its options and the condition variable
// its program threads wait on; the executor holds pointers to them (the run
// outlives it) and owns what is in flight: each node's progress, the
// requests in engines, the pinned prefixes of leaders' followers, the kept
// contexts (KeptContexts) and the inbox that engine callbacks append to.
//
// Threads. Every method is called with the run's lock held: Pump on the
// dispatcher thread, the others on program threads or the dispatcher's.
// Engine callbacks (engine threads) never call it: they append to the
// inbox under its own mutex, emit token events (RunEvents) and raise the
// runtime's wake signal, so they never wait for a Pump.
//
// Errors. None come back from these methods: what cannot be done fails its
// node (DagNode::error holds the cause, each output variable "node f#3
// failed: <cause>") and everything downstream, and the run goes on. A
// request every engine refuses as full is not an error: it is sent again
// shortly.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "exec/dispatcher.h"
#include "exec/kept_contexts.h"
#include "exec/prompt.h"
#include "exec/run_events.h"
#include "graph/dag.h"

namespace braid::rt {

// What the executor works on: the run's, fixed for its life.
struct ExecutedRun {
  std::shared_ptr<RuntimeContext> ctx;
  std::string id;                              // the engines' program (and client, by default)
  const RunOptions* options = nullptr;         // the run's
  bool resumed = false;                        // recorded calls replay from the store
  Clock::time_point t0{};                      // the run's clock starts here
  Dag* dag = nullptr;                          // the run's
  std::condition_variable* changed = nullptr;  // notified when a node or value changes
  std::shared_ptr<RunEvents> events;
};

// A running node's figures before its completion arrives.
struct LiveFigures {
  int generated_tokens = 0;      // streamed by its requests in flight
  std::optional<double> run_ms;  // since it was first submitted
};

class Executor {
 public:
  explicit Executor(ExecutedRun run);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Does every piece of work that is due (see above). Returns when it wants
  // to be pumped again at the latest (a round trip or a kept context's
  // expiry; nullopt: only when woken).
  std::optional<Clock::time_point> Pump();
  // Nothing in engines and no round trip pending.
  bool Idle() const;

  // Completes call `n` from the store when the run is a resumption that
  // recorded it (inputs ready, every output present); true when it did.
  bool Replay(NodeId n);
  // Fails `n` with `cause`, and with it every unfinished node downstream.
  // `inherited`: `cause` is the message of a failed input, passed on as is.
  void Fail(NodeId n, const std::string& cause, bool cancelled = false, bool inherited = false);
  // Sends the goals a Want changed to the requests already in engines.
  void PushGoals();
  // Cancels every request in flight, releases pins and kept contexts, and
  // cancels every unfinished node.
  void Cancel();
  // The run is over: kept contexts are released and no more are kept.
  void End();
  // Node `n`'s figures while it runs (Run::Nodes reads them).
  LiveFigures Live(NodeId n) const;

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
  struct Progress {
    int output = 0;                              // output being generated
    std::map<std::string, std::string> values;   // outputs generated so far
    std::map<std::string, ChoiceScores> scores;  // select outputs so far: their choices' scores
    // The select being scored: its choices' token counts, and with the
    // unconditional scoring the first pass's sums while the second (after
    // no prompt) runs.
    std::vector<size_t> choice_tokens;
    std::optional<std::vector<double>> conditional;
    CallPrompt prompt;  // the current segment's (no tokens: not rendered)
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
    // Tokens streamed so far (the engine's callback counts them; Live reads
    // them for running nodes, before the completion's usage arrives).
    std::shared_ptr<std::atomic<int>> live_tokens = std::make_shared<std::atomic<int>>(0);
    // Kept contexts this request extends: released once it is admitted (it
    // then holds the prefix itself).
    std::vector<KeptHold> holds;
  };
  // A leader's prefix, pinned on its engine until its followers are admitted.
  struct Share {
    int engine = 0;
    uint64_t pin = 0;
    int pending = 0;  // followers not admitted yet
  };

  bool dag_mode() const { return options_.mode == Mode::kDag; }
  double NowMs() const { return MsSince(t0_); }
  const Model& model() const { return *ctx_->tokenizer; }
  Engine* engine(int i) const { return ctx_->engine(i).engine; }
  void Notify();

  // -- events from the engines --
  void HandleEvent(const Event& ev);
  void OnAdmitted(uint64_t flight_id);
  void ReleaseFollowers(uint64_t flight_id, std::vector<NodeId> followers);
  void OnSegmentDone(NodeId n, const Completion& c);
  // A select's completion: false when it took care of the node (failed it,
  // or sent the unconditional pass).
  bool ScoreSelect(NodeId n, const Completion& c, std::string* value);
  void FinishSegment(NodeId n, const Completion& c, std::string value);
  // Resubmits `n` elsewhere when `c` failed on `engine` and that engine is
  // not alive (at most kMaxMoves times); true when it took care of `c`.
  bool MoveFromDeadEngine(NodeId n, int engine, const Completion& c);

  // -- scheduling --
  void FireRoundTrips(Clock::time_point now);
  void Schedule(Clock::time_point now);
  // Ready calls in node order; fails nodes with a failed input, runs joins
  // and replays recorded calls on the way.
  std::vector<NodeId> ReadyCalls(Clock::time_point now);
  void ScheduleBaseline(std::vector<NodeId> ready, Clock::time_point now);
  // Submits the leaders of prompts sharing a long prefix and holds their
  // followers; returns the nodes it took care of.
  std::set<NodeId> LeadSharedPrefixes(const std::vector<NodeId>& prepared);
  bool FollowInFlight(NodeId n);

  // -- submission --
  Status Prepare(NodeId n);
  Result<GenerationRequest> Request(NodeId n);
  DeltaCallback Callback(uint64_t flight_id, const Flight& f, NodeId n);
  // Submits to `*engine`, or when it is full to another that can take the
  // request (*engine then says which).
  Result<std::shared_ptr<RequestHandle>> SubmitAnywhere(const GenerationRequest& r,
                                                        const DeltaCallback& cb, bool needs_local,
                                                        int* engine);
  Status Submit(NodeId n, int engine, uint64_t* flight_id);
  void Started(NodeId n, int engine);
  void SubmitOrFail(NodeId n, int engine, uint64_t* flight_id = nullptr);

  // -- completion --
  void CompleteNode(NodeId n);
  void RunJoin(NodeId n);
  void SetVarFailed(VarId v, const std::string& message, bool cancelled);
  std::optional<Clock::time_point> NextWake(Clock::time_point now);

  const std::shared_ptr<RuntimeContext> ctx_;
  const std::string id_;
  const RunOptions& options_;
  const bool resumed_;
  const Clock::time_point t0_;
  Dag& dag_;
  std::condition_variable& changed_;
  const std::shared_ptr<RunEvents> events_;
  const std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();

  uint64_t next_flight_ = 0;
  std::map<NodeId, Progress> progress_;
  std::map<uint64_t, Flight> flights_;
  std::map<uint64_t, Share> shares_;
  KeptContexts kept_;
};

}  // namespace braid::rt
