// The semantic-variable runtime: programs of LLM calls as a DAG whose edges
// are semantic variables (futures). Calls add nodes and return output
// variables without running anything; Want(var, goal) activates everything
// upstream of var with a goal (latency, throughput or a deadline) deduced
// backwards through the DAG; a dispatcher thread runs ready, wanted nodes on
// one or more engines and fills their output variables.
//
// Threading: a Run is built and read from one "program" thread (the Lua
// driver); the dispatcher runs on the Runtime's own thread. WaitAny is how
// the program thread sleeps until something it waits for changes.
// Errors: Status / Result; a failed node fails its outputs and every
// variable downstream with the cause; independent branches go on.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/status.h"
#include "runtime/memory_account.h"
#include "runtime/placement.h"

namespace braid::rt {

using VarId = uint64_t;  // 0 = no variable
using NodeId = uint64_t;

enum class VarState { kPending, kReady, kFailed, kCancelled };
const char* VarStateName(VarState s);

enum class Criteria { kThroughput, kLatency };

struct GetOptions {
  Criteria criteria = Criteria::kThroughput;
  std::optional<double> deadline_ms;  // relative to the Want call; implies latency-style deduction
};

// ---- semantic functions ---------------------------------------------------

// One output placeholder of a template:
//   {{gen NAME max_tokens=N min_tokens=M stop="..." temperature=T top_p=P seed=S}}
//   {{select NAME choices=["a","b"] scoring="mean"}}  (scored by the model, no sampling)
//   {{regex NAME pattern="[0-9]+" max_tokens=N}}  (constrained decoding)
struct OutputSpec {
  enum class Kind { kGen, kSelect, kRegex };
  Kind kind = Kind::kGen;
  std::string name;
  int max_tokens = 128;
  // Tokens generated before a stop string or the end of generation may end
  // the output (at most max_tokens): "Summary: {{gen s stop=\"\\n\" min_tokens=1}}"
  // is not ended at once by a newline the model starts with.
  int min_tokens = 0;
  std::vector<std::string> stop;
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::optional<uint64_t> seed;
  std::vector<std::string> choices;  // select
  // How a select ranks its choices, from each choice token's log-probability
  // as a continuation of the prompt (SGLang's choices methods):
  //  - kMean: their mean (token-length normalized; the default: a sum
  //    favours short choices);
  //  - kSum: their sum, the choice's whole probability;
  //  - kUnconditional: the mean of each token's log-probability after the
  //    prompt minus after no prompt (unconditional-likelihood normalized:
  //    choices the model finds likely anywhere do not win by that alone).
  enum class Scoring { kMean, kSum, kUnconditional };
  Scoring scoring = Scoring::kMean;
  std::string pattern;  // regex
};

struct FunctionSpec {
  std::string name;    // for errors, the live view and resume keys
  std::string system;  // chat-style when non-empty (the model's chat template is used)
  // The template text: literal text ("{{{{" for a literal "{{"), {{input}}
  // and output placeholders.
  std::string prompt;
  // Calls start as soon as their inputs are ready (eager), with the
  // throughput goal until something wants them. A lazy function's calls run
  // only once wanted: for speculative branches the program may never read.
  bool lazy = false;
  // The earlier turns of a chat-style conversation; `prompt` is the final
  // user turn, after them. Roles "system" (first only, and not together
  // with `system`), "user", "assistant". Contents are templates that may
  // reference inputs ({{name}}) but hold no outputs. Non-empty makes the
  // function chat-style. (The "= {}" keeps {name, system, prompt} free of
  // missing-initializer warnings.)
  std::vector<ChatMessage> messages = {};
};

// A parsed template: literal text, input references and outputs, in order.
class SemanticFunction {
 public:
  struct Piece {
    enum class Kind { kText, kInput, kOutput };
    Kind kind;
    std::string text;  // kText: the literal; kInput: the input's name
    int output = -1;   // kOutput: index into outputs()
  };
  // Errors name the function, the line and column and what is wrong, e.g.
  // "summarize:3:12: unknown option 'max_token' in {{gen summary ...}}".
  static Result<std::shared_ptr<const SemanticFunction>> Parse(const FunctionSpec& spec);

  const FunctionSpec& spec() const { return spec_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  // The pieces of each of spec().messages (text and inputs only).
  const std::vector<std::vector<Piece>>& message_pieces() const { return message_pieces_; }
  // Distinct, in order: the messages' inputs first, then the prompt's.
  const std::vector<std::string>& inputs() const { return inputs_; }
  const std::vector<OutputSpec>& outputs() const { return outputs_; }
  // Rendered through the model's chat template (a system text or messages).
  bool chat() const { return !spec_.system.empty() || !spec_.messages.empty(); }

 private:
  FunctionSpec spec_;
  std::vector<Piece> pieces_;
  std::vector<std::vector<Piece>> message_pieces_;
  std::vector<std::string> inputs_;
  std::vector<OutputSpec> outputs_;
};

// The log-probability the model gives each choice of a select output (the
// sum over the choice's tokens, as a continuation of the prompt), in the
// order of its choices.
using ChoiceScores = std::vector<std::pair<std::string, double>>;

// A value for a template input: a variable, or literal text.
struct Arg {
  VarId var = 0;
  std::string text;
  static Arg Var(VarId v) { return {v, {}}; }
  static Arg Text(std::string t) { return {0, std::move(t)}; }
};

// ---- introspection ----------------------------------------------------------

enum class NodeState { kWaiting, kReady, kRunning, kDone, kFailed, kCancelled };
const char* NodeStateName(NodeState s);

struct NodeInfo {
  NodeId id = 0;
  std::string label;  // function name, or "join", "host", "map(f)", ...
  bool call = false;  // a model call (not a join or a host value)
  NodeState state = NodeState::kWaiting;
  std::vector<VarId> inputs, outputs;
  bool wanted = false;  // upstream of some Want
  Criteria goal = Criteria::kThroughput;
  int group = 0;        // task group (0 = none)
  double slack_ms = 0;  // deadline runs: latest start minus now at deduction
  int priority = 0;
  // Deadline runs: when the node must finish (on the run's clock, ms since
  // it started) and whether it did (unset until it finished).
  std::optional<double> deadline_ms;
  std::optional<bool> deadline_met;
  std::vector<VarId> read_before;  // values the program read before making this call
  std::string engine;              // where it ran
  int prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  int host_tokens = 0;  // of the prompt, copied back from the host KV tier
  double queued_ms = 0, run_ms = 0;
  double start_ms = -1, end_ms = -1;  // run clock; -1 = not yet
  double first_token_ms = -1;         // run clock: its first generated token
  double decode_tokens_per_s = 0;     // measured from the first token on (0: too few yet)
  bool scored = false;                // every output is a select: scored, nothing decoded
  std::string error;
  // A finished call whose output looks like a mistake: a gen that a stop
  // string ended at its first token, empty ("... use min_tokens=1 ...").
  std::string warning;
};

struct VarInfo {
  VarId id = 0;
  std::string name;
  VarState state = VarState::kPending;
  NodeId producer = 0;  // 0 for literals and host-set variables
  std::vector<NodeId> consumers;
  std::vector<NodeId> readers;  // calls made after the program read this value
  std::string value;            // when ready
  std::string error;            // when failed
  ChoiceScores scores;          // a ready select output: every choice's score
};

// ---- runs -------------------------------------------------------------------

enum class Mode {
  kDag,            // goals, task groups, prefix pinning, co-scheduling
  kBaseline,       // one blocking FCFS request at a time, calls in program order
                   // (a client that calls an endpoint once per node and waits)
  kBaselineAsync,  // every call an independent FCFS request, sent as soon as its
                   // inputs are ready (a client that fires calls concurrently)
};

struct RunOptions {
  // The program's identity: its path (the command line passes it absolute)
  // and ProgramHash of its source. Stored with a new run; a resume must give
  // the same program and args as the stored run (else InvalidArgument naming
  // both), and a different hash is reported by Run::resume_warning().
  std::string program;
  std::string program_hash;
  std::vector<std::string> args;
  Mode mode = Mode::kDag;
  int rtt_ms = 0;         // added client round trip per call (baseline comparisons)
  std::string resume_id;  // resume this stored run instead of starting one
  // Whose work this is, for fair sharing and accounting in the engines
  // (GenerationRequest::client); "" = the run id. A new run records it in
  // the store as its owner (RunRecord::owner); a resume leaves the stored
  // owner as it is.
  std::string client;
  // The largest value the runtime builds from others (a join's result, a
  // rendered prompt); a node that would build a larger one fails, naming
  // both sizes, instead of growing without bound.
  size_t max_value_bytes = size_t{64} << 20;
  // Where the bytes of the values the run builds (joins, generated outputs)
  // come from; a node whose value the account refuses fails, naming the
  // cap. Null: no budget beyond max_value_bytes.
  std::shared_ptr<MemoryAccount> memory;
};

// A digest of a program's source for RunOptions::program_hash: FNV-1a 64 of
// the bytes and their length, "fnv1a64:<16 hex digits>:<length>". It tells an
// edited file from the one a run recorded; it is not meant to resist a
// deliberately made collision.
std::string ProgramHash(std::string_view source);

// A call's identity for resume: stable across re-executions of the same program.
struct CallKey {
  std::string path;  // coroutine path, e.g. "main/3/1"
  int index = 0;     // call index within that coroutine
};

// What a run reports as it goes (Run::Watch).
struct RunEvent {
  enum class Kind { kNodeStarted, kNodeFinished, kNodeFailed, kTokens };
  Kind kind = Kind::kNodeStarted;
  NodeId node = 0;
  VarId var = 0;     // kTokens: the output being generated
  std::string text;  // kTokens: the new text; kNodeFailed: the cause
  // Node events: the node's label (function name, "join", ...) and its
  // times on the run's clock (-1: not yet), for watchers that cannot call
  // back into the run.
  std::string label;
  double start_ms = -1, end_ms = -1;
};
// Called for node starts, finishes and failures on the dispatcher thread
// with the run's lock held, and for token deltas on an engine thread: it
// must neither block nor call back into the run.
using RunWatcher = std::function<void(const RunEvent&)>;

class Run {
 public:
  virtual ~Run() = default;
  virtual const std::string& id() const = 0;
  // Non-empty when this run resumes one recorded from a different source of
  // the same program (RunOptions::program_hash differs): says what changed.
  virtual std::string resume_warning() const { return ""; }

  // -- building (program thread) --
  // Adds a call of `fn` with every input bound; returns its outputs by name.
  // `read_before`: values the program read (ready variables) before making
  // the call; the call depends on them through the program's own code, so
  // they become "read-before" edges of the graph (not inputs: they are
  // ready, and failing them later is impossible). Errors: a missing or
  // unknown input, an unknown variable.
  virtual Result<std::map<std::string, VarId>> Call(const SemanticFunction& fn,
                                                    const std::map<std::string, Arg>& args,
                                                    const CallKey& key,
                                                    const std::vector<VarId>& read_before = {}) = 0;
  // Of `vars`, those that are not upstream of another of them (nor
  // literals): the smallest set a later call's read-before edges need.
  virtual std::vector<VarId> LatestOf(const std::vector<VarId>& vars) const { return vars; }
  // A ready variable holding `value`.
  virtual VarId Literal(std::string value, std::string name = "") = 0;
  // A native node: the parts joined with `sep` once all are ready.
  virtual Result<VarId> Join(const std::vector<Arg>& parts, std::string sep) = 0;
  // A variable the program itself will set later (braid.map and other host
  // code); `label` names its node in the graph and the live view.
  virtual VarId HostVar(std::string name, const std::vector<VarId>& depends_on,
                        std::string label = "host") = 0;
  virtual Status SetValue(VarId var, std::string value) = 0;
  virtual Status SetFailed(VarId var, std::string error) = 0;
  // Makes the host variable `host_var` depend on `dep` as well (as if listed
  // in depends_on). Errors: unknown variables, `host_var` not a pending host
  // variable, or the edge would close a cycle (the message names its nodes).
  virtual Status AddDependency(VarId host_var, VarId dep) {
    return Status::Unsupported("AddDependency");
  }

  // -- waiting (program thread) --
  // Activates everything upstream of `var` with the deduced goals.
  virtual Status Want(VarId var, const GetOptions& options) = 0;
  virtual VarState state(VarId var) const = 0;
  virtual std::string value(VarId var) const = 0;  // "" unless ready
  virtual std::string error(VarId var) const = 0;  // "" unless failed
  // The scores of a ready select output (any thread). Errors:
  // InvalidArgument when `var` is unknown or not a select output; NotFound
  // while it is not ready, or when it was replayed on resume from a record
  // that has no scores.
  virtual Result<ChoiceScores> scores(VarId var) const {
    return Status::Unsupported("this run does not keep the scores of select outputs");
  }
  // Sleeps until any of `vars` leaves kPending (or timeout_ms passes; -1 = no limit).
  virtual void WaitAny(const std::vector<VarId>& vars, int timeout_ms) = 0;
  // Whether any of `vars` leaves kPending without the program doing
  // anything more: it is not pending already, or its producer is a call that
  // runs (eager, or lazy and wanted) or a join, and all their inputs settle.
  // A variable the program sets itself (HostVar) does not settle by itself.
  virtual bool AnySettles(const std::vector<VarId>& vars) const {
    for (VarId v : vars)
      if (state(v) != VarState::kPending) return true;
    return false;
  }
  // Unfinished nodes that will still run without the program doing anything
  // more (their outputs settle): the work a program leaves behind when it
  // returns early.
  virtual std::vector<NodeInfo> Outstanding() const { return {}; }

  // -- resume of non-deterministic host values (os.time, random numbers) --
  // Returns the recorded value for `key` if this run is a resumption and has
  // one; otherwise records `value` and returns it. A kBatched value reaches
  // the store with the run's next call or end (RunStore::BufferValue), so a
  // program polling the clock costs no write per read; a crash before then
  // loses only values that nothing recorded depends on. kNow is durable on
  // return. A run records at most kMaxHostValues kBatched values: past them a value
  // is returned unrecorded (a resume reads fresh ones from there on), and
  // the run's events say so once ("host_values_capped").
  enum class Durability { kBatched, kNow };
  static constexpr size_t kMaxHostValues = 100000;
  virtual std::string Replayable(const std::string& key, const std::string& value,
                                 Durability durability) = 0;

  // -- introspection (any thread) --
  virtual std::vector<NodeInfo> Nodes() const = 0;
  virtual std::vector<VarInfo> Vars() const = 0;
  // Graphviz dot text: nodes coloured by state, labelled with timings.
  virtual std::string ToDot() const = 0;
  // Sets the run's one watcher (null removes it); any thread. Requests
  // already in engines report their tokens to it from their next delta.
  virtual void Watch(RunWatcher watcher) {}

  // Cancels every pending node; their outputs become kCancelled.
  virtual void Cancel() = 0;
  // Marks the run finished in the store (ok or with an error).
  virtual void Finish(const Status& status) = 0;
  // Records in the store that the run starts executing once more (braid
  // serve, when a run gets its thread) and returns how many times it has
  // since it last recorded a call, this one included (RunRecord::attempts).
  // Unsupported without a store.
  virtual Result<int> BeginAttempt() {
    return Status::Unsupported("this run does not count its attempts");
  }
};

class RunStore;  // runtime/store/run_store.h

// Contexts kept between a program's calls (DAG mode). When a call finishes,
// its context (prompt and output) may be extended by the program's next call
// once its tool returns; the runtime learns per function how often that
// happens and after how long (runtime/exec/retention.h), and for a function
// whose calls are extended keeps the context: pinned in the engine for a
// time-to-live covering most gaps seen (`pin`), and/or announced to the
// engine as expected back at the usual gap (`expect`: Engine::ExpectUse,
// which orders eviction and anti-thrashing admission). Released when the
// next call is admitted, the time-to-live passes or the run ends.
struct RetentionOptions {
  bool pin = false;
  bool expect = false;
  double first_ttl_ms = 2000;  // before any gap of the function is measured
  double max_ttl_ms = 30000;
};

struct RuntimeOptions {
  std::vector<Engine*> engines;  // not owned; at least one
  std::vector<std::string> engine_names;
  // Tokenization and chat templates for every call (engines run the same
  // model). Null: the first engine's model, which must then run here.
  const Model* tokenizer = nullptr;
  std::string db_path;              // SQLite file for runs; "" = not persisted
  std::shared_ptr<RunStore> store;  // an already open store (tests, embedding); wins over db_path
  // Which engine takes each call when there are several (placement.h).
  Placement placement = Placement::kAffinity;
  RetentionOptions retention;
};

class Runtime {
 public:
  static Result<std::unique_ptr<Runtime>> Open(const RuntimeOptions& options);
  virtual ~Runtime() = default;
  // A new run, or the resumption of RunOptions::resume_id (NotFound if unknown).
  virtual Result<std::shared_ptr<Run>> StartRun(const RunOptions& options) = 0;
  // The runs of the runtime's store, newest first, at most `limit` (<= 0:
  // all); a run recorded as running that is not live in this runtime reads
  // "interrupted", a live one "running". Unsupported without a store.
  virtual Result<std::vector<struct RunRecord>> StoredRuns(int limit) = 0;
  // As StoredRuns, of the runs whose owner is `owner` only ("" : the runs
  // that have no owner).
  virtual Result<std::vector<struct RunRecord>> StoredRunsOf(const std::string& owner,
                                                             int limit) = 0;
  // A value a run recorded with Run::Replayable (nullopt: none under `key`).
  virtual Result<std::optional<std::string>> StoredValue(const std::string& run_id,
                                                         const std::string& key) = 0;
  // The placement service the runtime's calls go through, for others that
  // send requests to the same engines (the OpenAI-compatible API).
  virtual std::shared_ptr<const EnginePlacement> placement() const = 0;
};

// Runs recorded in a run store (`braid runs`). A live run holds its store
// exclusively (store/run_store.cpp), so a run recorded as running in a store
// that could be opened is not running any more: its state reads
// "interrupted" (resume it with `braid run --resume ID`).
struct RunRecord {
  std::string id, program, state, error;  // state: done, failed, cancelled or interrupted
  // The client the run belongs to (RunOptions::client when it was created);
  // "" for runs of braid run, of a server without API keys, and runs
  // recorded before the store kept owners.
  std::string owner;
  std::vector<std::string> args;
  double started_unix = 0, finished_unix = 0;  // finished 0: never finished
  // Between processes (killed or stopped, then resumed): not part of the
  // run's duration, which is finished - started - paused.
  double paused_seconds = 0;
  int attempts = 0;  // starts by a server since its last recorded call (Run::BeginAttempt)
  int nodes_done = 0, nodes_failed = 0;
  int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
};
// A finished call of a run, with its output values.
struct RunNodeRecord {
  std::string function;
  std::map<std::string, std::string> outputs;
};
// Newest first, at most `limit` (<= 0: all). NotFound when no store exists at
// db_path (nothing is created).
Result<std::vector<RunRecord>> ListStoredRuns(const std::string& db_path, int limit);
// One run, and its finished calls in order into *nodes (when not null).
Result<RunRecord> GetStoredRun(const std::string& db_path, const std::string& id,
                               std::vector<RunNodeRecord>* nodes);
Status DeleteStoredRun(const std::string& db_path, const std::string& id);

}  // namespace braid::rt
