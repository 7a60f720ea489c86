// The driver: runs a Braid Lua program against one rt::Run on the calling
// thread. The program's main chunk and every coroutine it spawns
// (braid.spawn, braid.map) share one Lua state; the driver resumes them in
// turn. A coroutine that calls v:get() on a pending variable yields to the
// driver; when every live coroutine is blocked, the driver sleeps in
// Run::WaitAny on the union of the variables they wait for and resumes those
// whose variables changed. Every get first calls Run::Want with its goal.
// braid.sleep blocks its coroutine the same way, until a time: the driver's
// wait ends by then, and the others run meanwhile.
//
// The program ends when its main function returns and the work it leaves
// (coroutines still running, calls that will still run) is finished or,
// as DriverOptions::on_return says, cancelled with a warning naming each
// piece. A spawned coroutine that failed and was never joined fails the
// program.
//
// Resume keys: each semantic-function call gets CallKey{path, index}, where
// path names the coroutine in the spawn tree ("main", "main/2", "main/2/1":
// the 2nd coroutine spawned by main, then its 1st) and index counts calls
// within that coroutine; both are deterministic however the scheduler
// interleaves coroutines. os.time, os.clock, os.date and unseeded
// math.random go through Run::Replayable with keys built the same way.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"
#include "lua/lua_state.h"
#include "runtime/runtime.h"

namespace braid::lua {

struct DriverOptions {
  LuaLimits limits;
  // braid.log and print lines (default: stderr). Called on the driver's thread.
  std::function<void(std::string_view)> log;
  // When set and it becomes true (any thread, e.g. a SIGINT handler), the
  // program stops at its next instruction or wait, the run is cancelled and
  // RunProgram returns kCancelled.
  const std::atomic<bool>* interrupt = nullptr;
  // Longest single sleep in WaitAny (or in a braid.sleep), so interrupts
  // are noticed.
  int poll_ms = 200;
  // braid.read(path) may read: files named exactly by a program argument
  // (the user granted them on the command line) and relative paths without
  // ".." inside `script_dir` (the app's bundled inputs); "" = none there.
  std::string script_dir;
  // false: braid.read reads nothing, whatever the arguments name (a server,
  // where programs and their arguments come from clients: an argument
  // naming a path must not open the server's file).
  bool read_files = true;
  size_t max_read_bytes = size_t{16} << 20;
  // Caps on what one program may create.
  // Work left when the main function returns: spawned coroutines not done
  // and calls that will still run. kWait (default) finishes it first; a
  // coroutine that can never finish (it waits for something nothing will
  // produce) and, with kCancel, all of it is cancelled with a warning
  // through `log` naming each piece.
  enum class OnReturn { kWait, kCancel };
  OnReturn on_return = OnReturn::kWait;
  size_t max_coroutines = 100000;
  size_t max_functions = 10000;
};

// What the program returned (its first return value, with any variables in
// it replaced by their values).
struct ProgramResult {
  enum class Kind { kNil, kString, kJson };
  Kind kind = Kind::kNil;
  std::string text;  // kString: the string itself; kJson: compact JSON text
};

// Runs `source` (named `chunkname` in errors, e.g. "apps/chain/app.lua") with
// `args` as braid.args and as the arguments of the main function.
// Errors (InvalidArgument unless said otherwise): a syntax error, a runtime
// error or a failed variable reaching the top of main, a resource limit
// (ResourceExhausted), a deadlock, an interrupt (Cancelled). The message is
// "FILE:LINE: what" followed by "\nstack traceback:\n..." lines where Lua
// code was running.
Result<ProgramResult> RunProgram(rt::Run& run, const std::string& chunkname,
                                 const std::string& source, const std::vector<std::string>& args,
                                 const DriverOptions& options);

// Compiles `source` without running it: InvalidArgument with the message
// RunProgram would give ("FILE:LINE: ...") for a syntax error, before a run
// is recorded or a model loaded.
Status CheckSyntax(const std::string& chunkname, const std::string& source,
                   const LuaLimits& limits);

// ---- the driver as seen by the braid module (lib_braid.cpp) ----------------
// Everything below is called on the Lua thread from inside host sections.

class Driver {
 public:
  enum class CoStatus { kRunnable, kWaitVar, kWaitJoin, kSleep, kDone, kFailed };
  struct Coroutine {
    int id = 0;
    std::string path;
    lua_State* thread = nullptr;
    int ref = 0;                         // registry reference keeping the thread alive
    int nargs = 0;                       // values to pass on the next resume
    int calls = 0;                       // semantic-function calls made so far
    int spawns = 0;                      // coroutines spawned so far
    std::map<std::string, int> replays;  // Replayable calls per kind
    CoStatus status = CoStatus::kRunnable;
    rt::VarId var = 0;                              // kWaitVar
    bool wanted = false;                            // kWaitVar: did the waiter call Want?
    int join_target = -1;                           // kWaitJoin
    std::chrono::steady_clock::time_point wake_at;  // kSleep
    std::vector<int> joiners;
    int nresults = 0;         // kDone: how many results
    int results_ref = 0;      // kDone: registry reference of the results' list
    std::string error;        // kFailed: "FILE:LINE: message"
    std::string traceback;    // kFailed: "stack traceback:\n..."
    bool error_seen = false;  // a join raised the error
    bool background = false;  // braid.map bodies: errors are handled inside
    // Values this coroutine (or its parent before spawning it, or a
    // coroutine it joined) read: its next calls depend on them (read-before
    // edges). Kept minimal with Run::LatestOf.
    std::vector<rt::VarId> reads;
  };

  Driver(rt::Run& run, LuaState& state, const DriverOptions& options);
  ~Driver();

  static Driver* From(lua_State* L);
  rt::Run& run() { return run_; }
  LuaState& state() { return state_; }
  const DriverOptions& options() const { return options_; }
  const std::vector<std::string>& args() const { return args_; }

  // The driver coroutine now running.
  Coroutine& current() { return *coros_[current_]; }
  Coroutine* coroutine(int id);

  rt::CallKey NextCallKey();
  // The current coroutine read `var`'s value (or the values in `vars`).
  void NoteRead(rt::VarId var) { NoteReads({var}); }
  void NoteReads(const std::vector<rt::VarId>& vars);
  // What the current coroutine's next call was preceded by (Coroutine::reads).
  std::vector<rt::VarId> Reads() const;
  // "PATH:what#k", k counting `what` within the current coroutine.
  std::string NextReplayKey(const std::string& what);

  // Registers a parsed function; returns its index or -1 over the cap.
  int AddFunction(std::shared_ptr<const rt::SemanticFunction> fn);
  const rt::SemanticFunction* function(int index) const;

  // Display names of variables ("summarize.summary"), for messages.
  void NameVar(rt::VarId var, std::string name);
  std::string VarName(rt::VarId var) const;

  // Creates a coroutine from the function and nargs values on top of L's
  // stack (function below its arguments; all popped). Returns its id, or -1
  // (with `error` set) over the cap.
  int Spawn(lua_State* L, int nargs, bool background, std::string* error);

  // Marks the current coroutine blocked; the caller then yields with
  // LuaState::HostYieldTag().
  void BlockOnVar(rt::VarId var, bool wanted);
  void BlockOnJoin(int target);
  // Blocks the current coroutine for `seconds` (braid.sleep); the caller
  // then yields as above.
  void BlockOnSleep(double seconds);

  // braid.read: the file's contents under the policy of DriverOptions::script_dir.
  Result<std::string> ReadFile(const std::string& path) const;

  // Pushes the results of finished coroutine `id` onto L (returns how many,
  // or -1 when L has no stack room for them).
  int PushResults(int id, lua_State* L);

  // Runs the program (see RunProgram).
  Result<ProgramResult> Execute(const std::string& chunkname, const std::string& source,
                                const std::vector<std::string>& args);

  // ---- the REPL: one program state fed input by input ----
  // Opens the braid module in the state (once; Execute and Evaluate call it).
  Status Open();
  // Evaluates `source` in the state the earlier inputs left (globals stay)
  // as a top-level coroutine "repl/N" (so resume keys stay deterministic),
  // first as `return <source>` (an expression prints its value), else as
  // written. An empty `chunkname` names the chunk "inputN" (errors say
  // "input3:1: ...", functions default to "fn@input3:1"). Returns the printed form of each value it
  // returned (tostring, so a variable shows its name and state) once it is done or failed;
  // coroutines it spawned carry on during later inputs. Each input gets the
  // Lua limits whole. Errors: a syntax error (IsIncomplete says whether
  // more lines could complete it), a runtime error "FILE:LINE: what" with
  // its traceback, a limit (ResourceExhausted), an interrupt (Cancelled:
  // the input stops waiting; the state stays usable).
  Result<std::vector<std::string>> Evaluate(const std::string& chunkname,
                                            const std::string& source);
  // Where braid.read finds relative paths from now on (DriverOptions::script_dir).
  void set_script_dir(std::string dir) { options_.script_dir = std::move(dir); }
  // A program file in the session: its chunk runs, and the function it
  // returns (a program's main) is called with `args`, as braid run does;
  // variables in the result are resolved. An empty `chunkname`: "inputN".
  Result<std::vector<std::string>> EvaluateProgram(const std::string& chunkname,
                                                   const std::string& source,
                                                   const std::vector<std::string>& args);
  // Whether a syntax error's message means the input ended too early.
  static bool IsIncomplete(const std::string& message);

 private:
  void Step(int id);
  // Runs coroutines in turn, sleeping while all wait, until `done()` (asked
  // after each round), a fatal error or an interrupt (both in fatal_).
  void RunUntil(const std::function<bool()>& done);
  // The chunk name of a REPL input: `chunkname`, or if empty "inputN", N
  // the number the input will run under (repl/N).
  std::string InputName(const std::string& chunkname) const;
  // Spawns the function and nargs values on top of the stack as REPL input
  // repl/N and runs until it is done or failed; what it returned, printed.
  Result<std::vector<std::string>> RunInput(int nargs);
  // Moves the nres results of finished coroutine c off its thread (false:
  // too many to move).
  bool KeepResults(Coroutine& c, int nres);
  std::string ErrorWithTraceback(lua_State* co, int status);
  void Wake(Coroutine& c);
  // Sleeps until a waiting coroutine can go on (a variable it waits for
  // settled, or its braid.sleep is over), at most DriverOptions::poll_ms;
  // an error when none ever can.
  Status WaitForProgress();
  // The work left when main returned (DriverOptions::on_return).
  void FinishLeftovers();
  Result<ProgramResult> MainResult();

  rt::Run& run_;
  LuaState& state_;
  DriverOptions options_;
  std::vector<std::string> args_;
  std::vector<std::unique_ptr<Coroutine>> coros_;
  std::deque<int> runnable_;
  int current_ = 0;
  std::vector<std::shared_ptr<const rt::SemanticFunction>> functions_;
  std::map<rt::VarId, std::string> var_names_;
  std::map<std::string, int> init_replays_;
  Status fatal_;                   // a limit or interrupt: the whole program stops
  bool opened_ = false;            // the braid module is open
  std::string top_path_ = "main";  // the path of a coroutine spawned from the host
  int inputs_ = 0;                 // REPL inputs evaluated
};

}  // namespace braid::lua
