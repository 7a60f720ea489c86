// LuaState: one sandboxed Lua 5.4 state with resource limits, owned by RAII.
//
// The sandbox (see docs/lua-dsl.md, "Sandbox"): the libraries base, coroutine,
// table, string, math, utf8 and a trimmed os (time, clock, date, difftime).
// Absent: io, debug, package, require, dofile, loadfile, string.dump,
// os.execute/getenv/remove/... ; load accepts text chunks only (mode "t");
// collectgarbage answers "count" only; setmetatable refuses __gc; print
// writes a log line (stdout belongs to the program's result). Touching a
// removed global raises "'io' is not available in the Braid sandbox".
//
// Limits, each failing the running script with a clear error:
//  - memory: every allocation goes through our lua_Alloc; over the cap it
//    returns NULL, which Lua raises as a memory error;
//  - instructions: a count hook adds up executed VM instructions;
//  - time: a wall-clock budget of the work the host's thread does for the
//    script: Lua code, the C functions it calls (braid's host calls that
//    build calls and copy their inputs included) and the host's own work
//    between them; only the time it spends blocked waiting for the model
//    or in braid.sleep (BeginWait/EndWait) is left out. The clock runs within slices
//    (BeginSlice/EndSlice) and between BeginWork and EndWork. The count
//    hook checks it, and so do every host call (AtHostCall), every resume
//    of a coroutine by the host (CheckLimitsNow) and every allocation of
//    kCheckAtAllocBytes or more: time spent in C functions is caught soon
//    after, however few instructions run between them.
// Once a limit is hit the hook fires on every instruction, so a script cannot
// catch the error with pcall and carry on. No hook fires inside a C call, so
// the string pattern functions (lua_string_lib.h) charge their matcher's
// steps as instructions and check the same limits (ChargeSteps).
//
// Lua errors are longjmps. The rule for our C functions (the "host section"
// rule, documented in docs/lua-dsl.md): a lua_CFunction holds no C++ object
// with a destructor in its own frame; it checks arguments (luaL_check*, which
// may raise), then calls a noexcept helper that may hold C++ objects but only
// uses Lua API calls that cannot raise while memory is available: raw table
// access, push*, to*. While a helper runs the host is "in a host section"
// (EnterHost/LeaveHost) and the allocator does not enforce the cap, so those
// calls cannot fail; the helper returns, its objects are destroyed, and only
// then does the C function raise (lua_error) or yield. The host's own code
// outside any Lua call is a host section too.
//
// Threading: a LuaState and everything reached from it belong to one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

struct lua_State;
struct lua_Debug;

namespace braid::lua {

struct LuaLimits {
  size_t memory_bytes = size_t{256} << 20;  // 0 = no cap
  uint64_t max_instructions = 0;            // 0 = no cap
  double cpu_seconds = 10.0;                // the script's time (above); 0 = no cap
  // Where the heap and host bytes come from beyond what the state already
  // holds (a server's memory budget), taken in steps of kTakeMemoryStep:
  // returns "" when granted, else why not, which the memory limit's
  // message then gives. Empty: memory_bytes alone.
  std::function<std::string(size_t)> take_memory;
};

// What a state takes through LuaLimits::take_memory at a time.
inline constexpr size_t kTakeMemoryStep = size_t{1} << 20;

// Hook granularity: instructions between limit checks.
inline constexpr int kHookEvery = 1000;
// Allocations of at least this many bytes check the limits as well.
inline constexpr size_t kCheckAtAllocBytes = size_t{1} << 20;

// Which limit stopped the script, if any.
enum class LimitHit { kNone, kMemory, kInstructions, kTime, kInterrupted };

class LuaState {
 public:
  // A fresh sandboxed state. Returns nullptr only if Lua cannot allocate its
  // initial state (nothing else can fail).
  static std::unique_ptr<LuaState> Create(const LuaLimits& limits);
  ~LuaState();
  LuaState(const LuaState&) = delete;
  LuaState& operator=(const LuaState&) = delete;

  lua_State* L() const { return L_; }
  const LuaLimits& limits() const { return limits_; }

  // The LuaState that owns `L` (any thread of it).
  static LuaState* From(lua_State* L);

  // Host sections (see above). Nest freely; cheap.
  void EnterHost() { ++host_depth_; }
  void LeaveHost() { --host_depth_; }

  // Time accounting: the host brackets every stretch of Lua execution,
  // naming the coroutine it resumes (a limit makes that one yield back).
  // The clock runs within a slice.
  void BeginSlice(lua_State* running);
  void EndSlice();
  // The clock also runs between BeginWork and EndWork (the driver brackets a
  // program or a REPL input: its own work between slices counts), except
  // between BeginWait and EndWait (blocked waiting for the model). All nest.
  void BeginWork() { SetClock(+1, 0); }
  void EndWork() { SetClock(-1, 0); }
  void BeginWait() { SetClock(0, +1); }
  void EndWait() { SetClock(0, -1); }
  // Seconds counted against LuaLimits::cpu_seconds so far.
  double cpu_seconds_used() const;
  uint64_t instructions_used() const { return instructions_; }
  size_t memory_used() const { return mem_used_; }

  // Host copies of script data (call inputs, join parts, values the script
  // sets) count against the memory cap as well. Returns false, and records
  // the memory limit as hit, when `bytes` more would exceed it.
  bool ChargeHost(size_t bytes);
  // Whether heap and host bytes may grow to `total`: within memory_bytes and
  // what the account gives. Records the memory limit as hit when not.
  bool MayHold(size_t total);
  size_t host_bytes() const { return host_bytes_; }

  // Marks the thread at `idx` of L as run by the host: the script's
  // coroutine.resume and coroutine.close refuse it.
  void MarkHostThread(lua_State* L, int idx);

  // Asks the running script to stop at its next limit check (any thread may
  // call it; it is how Ctrl-C reaches a busy loop).
  void Interrupt() { interrupted_.store(true, std::memory_order_relaxed); }
  // Also stop when *flag becomes true (e.g. set by a SIGINT handler). The
  // flag must outlive this state.
  void SetInterruptFlag(const std::atomic<bool>* flag) { external_interrupt_ = flag; }
  bool interrupted() const {
    return interrupted_.load(std::memory_order_relaxed) ||
           (external_interrupt_ && external_interrupt_->load(std::memory_order_relaxed));
  }

  // Where print() lines go (default: stderr). Called on the Lua thread.
  void SetLogger(std::function<void(std::string_view)> logger) { logger_ = std::move(logger); }
  void Log(std::string_view line) const;

  // Lua values yielded with this tag as their first value are requests to
  // the host (the driver): the sandbox's coroutine.resume/wrap pass them up
  // through coroutines the script created itself, so a `get` deep inside a
  // user coroutine still reaches the scheduler.
  static void* HostYieldTag();

  // For C functions that run long without Lua instructions (the pattern
  // matcher): charges `steps` to the instruction count and checks the limits
  // the count hook checks (interrupt, instructions, time). Returns true when
  // an instruction, time or interrupt limit is hit (now or before); the C
  // function must then leave its frame holding no C++ object with a
  // destructor and `return StopForLimit(L);`.
  bool ChargeSteps(lua_State* L, uint64_t steps);
  // Checks the limits at the start of a host call (lib_braid's HostCall)
  // made by the script (within a slice; the host's own setup is not held to
  // them), counting it as one instruction: time spent in earlier C
  // functions is caught here even when few Lua instructions run between
  // them (a loop of calls, many short coroutines). Same contract as
  // ChargeSteps.
  bool AtHostCall(lua_State* L) { return running_ && ChargeSteps(L, 1); }
  // Checks the limits from the host, outside Lua (the driver, before it
  // resumes a coroutine): records a limit that is over, with no position in
  // its message. True when an instruction, time or interrupt limit is hit.
  bool CheckLimitsNow();
  // Stops the script after a limit as the count hook does: yields to the
  // host from the host's coroutine where it can, else raises a memory error
  // that no message handler sees and makes the hook fire at every
  // instruction, so no pcall can carry on. Where neither can happen (Lua run
  // outside a slice, in a host section) it raises the limit as a plain error.
  int StopForLimit(lua_State* L);

  // The limit that was hit (sticky), and a one-line explanation of it, e.g.
  // "time limit: the script ran for more than 10 s (--lua-seconds)".
  LimitHit limit_hit() const { return hit_; }
  // Starts the instruction and time limits afresh and forgets a limit that
  // was hit and an Interrupt() (the REPL: each input gets the limits whole).
  // Memory stays as it is: what the state holds is still held.
  void ResetLimits();
  std::string LimitMessage() const;
  // "FILE:LINE: <LimitMessage()>" where an instruction, time or interrupt
  // limit struck ("" before one did).
  const char* limit_error() const { return hit_message_; }

  // Loads `source` as a text chunk named "@<chunkname>" (so errors read
  // "<chunkname>:LINE: ...") and leaves the function on the stack. On a
  // syntax error returns false and leaves the message on the stack.
  bool LoadText(const std::string& source, const std::string& chunkname);

 private:
  explicit LuaState(const LuaLimits& limits);
  static void* Alloc(void* ud, void* ptr, size_t osize, size_t nsize);
  static void Hook(lua_State* L, lua_Debug* ar);
  // Records the first instruction, time or interrupt limit hit, with
  // "FILE:LINE: " of `ar` (a Lua function's activation) in front.
  void CheckLimits(lua_State* L, lua_Debug* ar);
  // Which of those limits is over now (kNone: none); no side effects.
  LimitHit Over() const;
  // Adds to the work and wait depths, starting or stopping the clock when
  // whether it runs changes.
  void SetClock(int work, int wait);
  // Makes the hook fire at every instruction from now on, here and in the
  // host's coroutine.
  void HookEveryInstruction(lua_State* L);
  void OpenSandbox();

  lua_State* L_ = nullptr;
  LuaLimits limits_;
  size_t mem_used_ = 0;
  size_t host_bytes_ = 0;
  // Taken through limits_.take_memory so far, and why it refused more.
  size_t taken_ = 0;
  std::string account_refusal_;
  bool fail_allocs_ = false;      // set by Hook to raise a memory error
  int hook_every_ = kHookEvery;   // 1 once a limit is hit
  lua_State* running_ = nullptr;  // the coroutine the host is resuming
  int host_depth_ = 1;            // the host starts outside Lua
  uint64_t instructions_ = 0;
  LimitHit hit_ = LimitHit::kNone;
  int work_depth_ = 0;  // slices and BeginWork brackets open
  int wait_depth_ = 0;  // BeginWait brackets open
  bool clock_running_ = false;
  std::chrono::steady_clock::time_point clock_start_;
  double seconds_before_ = 0;  // counted before clock_start_
  std::atomic<bool> interrupted_{false};
  const std::atomic<bool>* external_interrupt_ = nullptr;
  std::function<void(std::string_view)> logger_;
  char hit_message_[256] = {0};
};

}  // namespace braid::lua
