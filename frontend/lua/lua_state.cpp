#include "lua/lua_state.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

#include "lua/lua_string_lib.h"

namespace braid::lua {
namespace {

char host_yield_tag;

// The sandbox, applied once by running this chunk with the host-yield tag as
// its argument. It only reshapes globals; every refusal names what was
// refused. Written in Lua because it is mostly table surgery.
const char* kSandboxLua = R"lua(
local tag = ...
local error, type, rawget, select = error, type, rawget, select

-- os: only clock and calendar functions (the host may replace them with
-- replayable versions).
os = { time = os.time, clock = os.clock, date = os.date, difftime = os.difftime }
string.dump = nil

local removed = { io = true, debug = true, package = true, require = true,
                  dofile = true, loadfile = true, loadstring = true, module = true }
for k in pairs(removed) do _G[k] = nil end

local raw_load = load
load = function(chunk, name, mode, ...)
  if mode ~= nil and mode ~= "t" then
    error("load: only text chunks (mode \"t\") are allowed in the Braid sandbox", 2)
  end
  return raw_load(chunk, name, "t", ...)
end

local raw_collect = collectgarbage
collectgarbage = function(opt, ...)
  if opt == "count" then return raw_collect("count") end
  error("collectgarbage: only \"count\" is allowed in the Braid sandbox", 2)
end

local raw_setmetatable = setmetatable
setmetatable = function(t, mt)
  if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
    error("setmetatable: __gc metamethods are not allowed in the Braid sandbox", 2)
  end
  return raw_setmetatable(t, mt)
end

-- The string metatable is shared by every string: locked, like the host's.
getmetatable("").__metatable = "locked"

-- Host yields (first value `tag`) travel up through coroutines the script
-- created, to the host's coroutine; the host's answer travels back down.
local create, resume, yield, status = coroutine.create, coroutine.resume,
                                       coroutine.yield, coroutine.status
local raw_close, pcall = coroutine.close, pcall
local pack, unpack = table.pack, table.unpack
-- Coroutines the host runs (main, braid.spawn, braid.map bodies): only the
-- host resumes or closes them; the script reaches them through
-- coroutine.running() but may not drive them.
local host_threads = raw_setmetatable({}, { __mode = "k" })
local function check_script_thread(co, what)
  if host_threads[co] then
    error(what .. ": this coroutine is run by braid (main, braid.spawn or braid.map); " ..
          "wait for it with join instead", 3)
  end
end
local function pass_up(co, r)
  while r[1] and r[2] == tag and status(co) == "suspended" do
    r = pack(resume(co, yield(tag)))
  end
  return r
end
coroutine.resume = function(co, ...)
  check_script_thread(co, "coroutine.resume")
  local r = pass_up(co, pack(resume(co, ...)))
  return unpack(r, 1, r.n)
end
coroutine.wrap = function(f)
  local co = create(f)
  return function(...)
    local r = pass_up(co, pack(resume(co, ...)))
    if not r[1] then error(r[2], 0) end
    return unpack(r, 2, r.n)
  end
end
-- coroutine.close runs the coroutine's pending __close handlers, which may
-- close further coroutines; Lua 5.4.4 does not count that nesting against
-- its C-stack limit, so a long chain overflows the C stack. Bound it here.
local close_depth = 0
coroutine.close = function(co)
  check_script_thread(co, "coroutine.close")
  if close_depth >= 64 then
    error("coroutine.close: closes nested more than 64 deep", 2)
  end
  close_depth = close_depth + 1
  local r = pack(pcall(raw_close, co))
  close_depth = close_depth - 1
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

raw_setmetatable(_G, { __index = function(_, k)
  if removed[k] then error("'" .. k .. "' is not available in the Braid sandbox", 2) end
  return nil
end })

return host_threads
)lua";

char host_threads_key;

// print(...): tostring of each argument, tab-separated, as one log line.
int LuaPrint(lua_State* L) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; ++i) {
    if (i > 1) luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, nullptr);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  size_t len = 0;
  const char* s = lua_tolstring(L, -1, &len);
  LuaState* state = LuaState::From(L);
  state->EnterHost();
  state->Log(std::string_view(s, len));
  state->LeaveHost();
  return 0;
}

int Panic(lua_State* L) {
  const char* msg = lua_tostring(L, -1);
  std::fprintf(stderr, "braid: unprotected Lua error (a bug in braid): %s\n", msg ? msg : "?");
  std::abort();
}

}  // namespace

void* LuaState::HostYieldTag() { return &host_yield_tag; }

LuaState::LuaState(const LuaLimits& limits) : limits_(limits) {}

LuaState::~LuaState() {
  // Nothing of the script runs while the state closes: no script object has
  // a finalizer (setmetatable refuses __gc, the host's metatables are
  // locked) and pending __close handlers of suspended coroutines are not
  // run by lua_close.
  if (L_) lua_close(L_);
}

std::unique_ptr<LuaState> LuaState::Create(const LuaLimits& limits) {
  std::unique_ptr<LuaState> s(new LuaState(limits));
  s->L_ = lua_newstate(&LuaState::Alloc, s.get());
  if (!s->L_) return nullptr;
  lua_atpanic(s->L_, Panic);
  s->OpenSandbox();
  return s;
}

LuaState* LuaState::From(lua_State* L) {
  void* ud = nullptr;
  lua_getallocf(L, &ud);
  return static_cast<LuaState*>(ud);
}

void* LuaState::Alloc(void* ud, void* ptr, size_t osize, size_t nsize) {
  auto* s = static_cast<LuaState*>(ud);
  // osize is the old block size only when ptr != NULL (else a type tag).
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    std::free(ptr);
    s->mem_used_ -= old;
    return nullptr;
  }
  if (nsize > old && s->host_depth_ == 0) {
    if (s->fail_allocs_) return nullptr;  // a limit's raise (see Hook)
    // C functions that run long make large blocks (string.rep, table.concat,
    // string.format): the limits are checked at those too. Once one is hit
    // the script gets no large block any more (each raises a memory error)
    // and the hook fires at the next instruction of the host's coroutine,
    // which stops it (lua_sethook may be called from anywhere, even a
    // signal handler).
    if (nsize >= kCheckAtAllocBytes && s->CheckLimitsNow()) {
      s->HookEveryInstruction(s->running_ ? s->running_ : s->L_);
      return nullptr;
    }
    if (!s->MayHold(s->mem_used_ + s->host_bytes_ - old + nsize))
      return nullptr;  // Lua raises "not enough memory"
  }
  void* p = std::realloc(ptr, nsize);
  if (!p) return nullptr;
  s->mem_used_ = s->mem_used_ - old + nsize;
  return p;
}

void LuaState::OpenSandbox() {
  // Host section: nothing below can hit the cap.
  static const luaL_Reg kLibs[] = {
      {LUA_GNAME, luaopen_base},       {LUA_COLIBNAME, luaopen_coroutine},
      {LUA_TABLIBNAME, luaopen_table}, {LUA_STRLIBNAME, luaopen_string},
      {LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8},
      {LUA_OSLIBNAME, luaopen_os},     {nullptr, nullptr}};
  for (const luaL_Reg* lib = kLibs; lib->func; ++lib) {
    luaL_requiref(L_, lib->name, lib->func, 1);
    lua_pop(L_, 1);
  }
  // luaL_requiref records libraries in package.loaded (a registry table);
  // there is no `package` global, so scripts cannot reach it.
  lua_pushcfunction(L_, LuaPrint);
  lua_setglobal(L_, "print");
  // Pattern functions whose matcher answers to the limits (a C call runs
  // no count hook).
  OpenStringPatterns(L_);
  if (luaL_loadbufferx(L_, kSandboxLua, std::strlen(kSandboxLua), "=sandbox", "t") != LUA_OK ||
      (lua_pushlightuserdata(L_, HostYieldTag()), lua_pcall(L_, 1, 1, 0)) != LUA_OK) {
    std::fprintf(stderr, "braid: sandbox setup failed: %s\n", lua_tostring(L_, -1));
    std::abort();  // our own chunk: a bug, never bad input
  }
  lua_rawsetp(L_, LUA_REGISTRYINDEX, &host_threads_key);
  lua_sethook(L_, &LuaState::Hook, LUA_MASKCOUNT, hook_every_);
}

void LuaState::Log(std::string_view line) const {
  if (logger_) {
    logger_(line);
  } else {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  }
}

bool LuaState::ChargeHost(size_t bytes) {
  if (!MayHold(mem_used_ + host_bytes_ + bytes)) return false;
  host_bytes_ += bytes;
  return true;
}

bool LuaState::MayHold(size_t total) {
  bool ok = !limits_.memory_bytes || total <= limits_.memory_bytes;
  if (ok && limits_.take_memory && total > taken_) {
    const size_t more = std::max(total - taken_, kTakeMemoryStep);
    std::string refusal = limits_.take_memory(more);
    if (refusal.empty()) {
      taken_ += more;
    } else {
      ok = false;
      if (account_refusal_.empty()) account_refusal_ = std::move(refusal);
    }
  }
  if (!ok && hit_ == LimitHit::kNone) hit_ = LimitHit::kMemory;
  return ok;
}

void LuaState::MarkHostThread(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &host_threads_key);
  lua_pushvalue(L, idx);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void LuaState::BeginSlice(lua_State* running) {
  running_ = running;
  SetClock(+1, 0);
  --host_depth_;
}

void LuaState::EndSlice() {
  running_ = nullptr;
  ++host_depth_;
  SetClock(-1, 0);
}

void LuaState::SetClock(int work, int wait) {
  work_depth_ += work;
  wait_depth_ += wait;
  const bool run = work_depth_ > 0 && wait_depth_ == 0;
  if (run == clock_running_) return;
  const auto now = std::chrono::steady_clock::now();
  if (run) {
    clock_start_ = now;
  } else {
    seconds_before_ += std::chrono::duration<double>(now - clock_start_).count();
  }
  clock_running_ = run;
}

double LuaState::cpu_seconds_used() const {
  double t = seconds_before_;
  if (clock_running_)
    t += std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start_).count();
  return t;
}

std::string LuaState::LimitMessage() const {
  char buf[256];
  switch (hit_) {
    case LimitHit::kNone:
      return "";
    case LimitHit::kMemory:
      if (!account_refusal_.empty()) return "memory limit: " + account_refusal_;
      std::snprintf(buf, sizeof buf,
                    "memory limit: the script needed more than %zu MB (--lua-memory-mb)",
                    limits_.memory_bytes >> 20);
      return buf;
    case LimitHit::kInstructions:
      std::snprintf(
          buf, sizeof buf,
          "instruction limit: the script ran more than %llu Lua instructions (--lua-instructions)",
          static_cast<unsigned long long>(limits_.max_instructions));
      return buf;
    case LimitHit::kTime:
      std::snprintf(buf, sizeof buf,
                    "time limit: the script ran for more than %g s (--lua-seconds)",
                    limits_.cpu_seconds);
      return buf;
    case LimitHit::kInterrupted:
      return "interrupted";
  }
  return "";
}

void LuaState::ResetLimits() {
  hit_ = LimitHit::kNone;
  hit_message_[0] = 0;
  account_refusal_.clear();
  instructions_ = 0;
  seconds_before_ = 0;
  clock_start_ = std::chrono::steady_clock::now();
  fail_allocs_ = false;
  interrupted_.store(false, std::memory_order_relaxed);
  hook_every_ = kHookEvery;
  lua_sethook(L_, &LuaState::Hook, LUA_MASKCOUNT, kHookEvery);
}

// The count hook. No C++ object with a destructor lives in this frame: it may
// raise or yield.
//
// Once a limit is hit the script must stop within a bounded time whatever it
// does, so the hook does not raise an ordinary error there: a pcall would
// catch it, and an xpcall message handler would run with hooks off (Lua
// disables them while a hook runs, and the handler runs inside our raise), so
// a looping handler could never be stopped. Instead:
//  - in the coroutine the host is resuming, when it can yield, the hook
//    yields: control returns to the driver at once, which sees the limit
//    and ends the program without resuming it (no handler, no unwinding);
//  - anywhere else (inside a message handler, a C callback such as a
//    table.sort comparator, a coroutine the script resumes) it raises a
//    memory error, for which Lua calls no message handler; from then on the
//    hook fires at every instruction, so each enclosing pcall gives the error
//    back at its next instruction until the host's coroutine yields.
void LuaState::Hook(lua_State* L, lua_Debug* ar) {
  LuaState* s = From(L);
  s->fail_allocs_ = false;
  s->instructions_ += s->hook_every_;
  s->CheckLimits(L, ar);
  if (s->hit_ == LimitHit::kNone || s->hit_ == LimitHit::kMemory) return;
  s->HookEveryInstruction(L);
  if (L == s->running_ && lua_isyieldable(L)) {
    lua_yield(L, 0);
    return;
  }
  s->fail_allocs_ = true;
  lua_newuserdatauv(L, 1, 0);  // fails: raises LUA_ERRMEM, which no handler sees
}

LimitHit LuaState::Over() const {
  if (interrupted()) return LimitHit::kInterrupted;
  if (limits_.max_instructions && instructions_ > limits_.max_instructions)
    return LimitHit::kInstructions;
  if (limits_.cpu_seconds > 0 && cpu_seconds_used() > limits_.cpu_seconds) return LimitHit::kTime;
  return LimitHit::kNone;
}

void LuaState::CheckLimits(lua_State* L, lua_Debug* ar) {
  if (hit_ != LimitHit::kNone) return;
  hit_ = Over();
  if (hit_ == LimitHit::kNone) return;
  // Where the limit struck, for the message (no allocation here).
  char where[128] = "";
  if (ar && lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
    std::snprintf(where, sizeof where, "%s:%d: ", ar->short_src, ar->currentline);
  EnterHost();
  {
    std::string m = LimitMessage();
    std::snprintf(hit_message_, sizeof hit_message_, "%s%s", where, m.c_str());
  }
  LeaveHost();
}

bool LuaState::CheckLimitsNow() {
  CheckLimits(L_, nullptr);
  return hit_ != LimitHit::kNone && hit_ != LimitHit::kMemory;
}

void LuaState::HookEveryInstruction(lua_State* L) {
  if (hook_every_ == 1) return;
  hook_every_ = 1;
  lua_sethook(L, &LuaState::Hook, LUA_MASKCOUNT, 1);
  // The host's coroutine too, when this is one the script resumed: it
  // yields at its next instruction.
  if (running_ && running_ != L) lua_sethook(running_, &LuaState::Hook, LUA_MASKCOUNT, 1);
}

bool LuaState::ChargeSteps(lua_State* L, uint64_t steps) {
  instructions_ += steps;
  if (hit_ == LimitHit::kNone && Over() != LimitHit::kNone) {
    // The message names the innermost Lua function's line: level 0 is the C
    // function itself, and it may be called through others (pcall(string.find,
    // ...)).
    lua_Debug ar;
    bool found = false;
    for (int level = 1; !found && lua_getstack(L, level, &ar); ++level)
      found = lua_getinfo(L, "l", &ar) && ar.currentline > 0;
    CheckLimits(L, found ? &ar : nullptr);
  }
  return hit_ != LimitHit::kNone && hit_ != LimitHit::kMemory;
}

// Called as `return StopForLimit(L);` from a lua_CFunction: lua_yield and
// the failing allocation leave the C function by longjmp, so its frame must
// hold nothing to destroy (the host-section rule).
int LuaState::StopForLimit(lua_State* L) {
  HookEveryInstruction(L);
  if (L == running_ && lua_isyieldable(L)) return lua_yield(L, 0);
  fail_allocs_ = true;
  lua_newuserdatauv(L, 1, 0);  // fails outside a host section: LUA_ERRMEM
  // Only reached in a host section, where allocations do not fail.
  fail_allocs_ = false;
  lua_pop(L, 1);
  lua_pushstring(L, hit_message_);
  return lua_error(L);
}

bool LuaState::LoadText(const std::string& source, const std::string& chunkname) {
  std::string name = "@" + chunkname;
  return luaL_loadbufferx(L_, source.data(), source.size(), name.c_str(), "t") == LUA_OK;
}

}  // namespace braid::lua
