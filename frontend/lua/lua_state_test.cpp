// The Lua sandbox: every escape hatch is refused with a message that names
// it, and the memory, instruction and time limits stop runaway scripts with
// clear errors that pcall cannot swallow.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

#include "lua/lua_state.h"

namespace braid::lua {
namespace {

struct Outcome {
  bool ok = false;
  std::string text;  // the error message, or the first result as a string
};

// Runs `code` as chunk "t.lua" in a coroutine the host resumes (as the
// driver does), inside one time slice. A limit makes the coroutine yield
// back for good; its message is then the outcome's text.
Outcome RunCode(LuaState& s, const std::string& code) {
  lua_State* L = s.L();
  Outcome o;
  if (!s.LoadText(code, "t.lua")) {
    o.text = lua_tostring(L, -1);
    lua_pop(L, 1);
    return o;
  }
  lua_State* co = lua_newthread(L);
  lua_insert(L, -2);
  lua_xmove(L, co, 1);
  int nres = 0;
  s.BeginSlice(co);
  int st = lua_resume(co, L, 0, &nres);
  s.EndSlice();
  o.ok = st == LUA_OK;
  if (st == LUA_YIELD || (s.limit_hit() != LimitHit::kNone && s.limit_hit() != LimitHit::kMemory)) {
    o.text = s.limit_error();  // as the driver reports it
  } else {
    const char* t = nres > 0 || st != LUA_OK ? lua_tostring(co, -1) : nullptr;
    o.text = t ? t : "";
  }
  lua_pop(L, 1);  // the thread
  return o;
}

// Runs `code` under lua_pcall on the state's main thread, which cannot
// yield: limits there raise errors no handler sees.
Outcome RunPcall(LuaState& s, const std::string& code) {
  lua_State* L = s.L();
  Outcome o;
  REQUIRE(s.LoadText(code, "t.lua"));
  s.BeginSlice(L);
  int st = lua_pcall(L, 0, 1, 0);
  s.EndSlice();
  o.ok = st == LUA_OK;
  const char* t = lua_tostring(L, -1);
  o.text = t ? t : "";
  lua_pop(L, 1);
  return o;
}

Outcome Run(const std::string& code, LuaLimits limits = {}) {
  auto s = LuaState::Create(limits);
  REQUIRE(s);
  return RunCode(*s, code);
}

void ExpectError(const std::string& code, const std::string& needle) {
  Outcome o = Run(code);
  CAPTURE(code);
  CAPTURE(o.text);
  CHECK_FALSE(o.ok);
  CHECK(o.text.find(needle) != std::string::npos);
}

TEST_CASE("removed globals are refused by name") {
  for (const char* g : {"io", "debug", "package", "require", "dofile", "loadfile", "loadstring"}) {
    ExpectError(std::string("return ") + g,
                std::string("'") + g + "' is not available in the Braid sandbox");
  }
  ExpectError("io.open('/etc/passwd')", "'io' is not available");
  ExpectError("require('os')", "'require' is not available");
  // Undefined globals of the script's own still read as nil.
  CHECK(Run("return tostring(my_global)").text == "nil");
}

TEST_CASE("os keeps only clock and calendar functions") {
  for (const char* f : {"execute", "exit", "getenv", "remove", "rename", "tmpname", "setlocale"}) {
    Outcome o = Run(std::string("return tostring(os.") + f + ")");
    CAPTURE(f);
    CHECK(o.text == "nil");
  }
  CHECK(Run("return type(os.time())").text == "number");
  CHECK(Run("return type(os.clock())").text == "number");
  CHECK(Run("return type(os.date('%Y'))").text == "string");
  ExpectError("os.execute('true')", "attempt to call a nil value (field 'execute')");
}

TEST_CASE("no bytecode: string.dump is gone and load takes text only") {
  CHECK(Run("return tostring(string.dump)").text == "nil");
  CHECK(Run("return tostring(('').dump)").text == "nil");
  ExpectError("return load('return 1', 'x', 'b')", "only text chunks");
  ExpectError("return load('return 1', 'x', 'bt')", "only text chunks");
  // A binary chunk header is refused even in mode "t".
  Outcome o = Run("local f, err = load('\\27Lua\\84\\0', 'x') return err");
  CHECK(o.text.find("binary chunk") != std::string::npos);
  CHECK(Run("return load('return 6 * 7')()").text == "42");
  // An explicit environment still works (and isolates).
  CHECK(Run("return load('return x', 'c', 't', { x = 'env' })()").text == "env");
}

TEST_CASE("collectgarbage answers count only; no __gc") {
  CHECK(Run("return type(collectgarbage('count'))").text == "number");
  ExpectError("collectgarbage()", "only \"count\"");
  ExpectError("collectgarbage('stop')", "only \"count\"");
  ExpectError("setmetatable({}, { __gc = function() end })", "__gc metamethods are not allowed");
  CHECK(Run("return tostring(getmetatable(setmetatable({}, { __index = {} })) ~= nil)").text ==
        "true");
}

TEST_CASE("errors carry file:line") {
  Outcome o = Run("local x = 1\nerror('boom')");
  CHECK(o.text == "t.lua:2: boom");
  o = Run("local x = \n\n)");
  CHECK_FALSE(o.ok);
  CHECK(o.text.rfind("t.lua:3:", 0) == 0);
}

TEST_CASE("memory cap") {
  LuaLimits limits;
  limits.memory_bytes = 8 << 20;
  auto s = LuaState::Create(limits);
  Outcome o = RunCode(*s, "local t = {} for i = 1, 1e8 do t[i] = ('x'):rep(100) .. i end");
  CHECK_FALSE(o.ok);
  CHECK(o.text.find("not enough memory") != std::string::npos);
  CHECK(s->limit_hit() == LimitHit::kMemory);
  CHECK(s->LimitMessage().find("memory limit") != std::string::npos);
  // The state is usable afterwards (the garbage is collectable).
  CHECK(RunCode(*s, "return 1 + 1").text == "2");
  // One huge string.
  Outcome big = Run("return #string.rep('x', 1 << 30)", limits);
  CHECK_FALSE(big.ok);
  CAPTURE(big.text);
  CHECK(big.text.find("not enough memory") != std::string::npos);
}

TEST_CASE("instruction limit stops while true do end") {
  LuaLimits limits;
  limits.max_instructions = 1000000;
  limits.cpu_seconds = 0;
  auto s = LuaState::Create(limits);
  Outcome o = RunCode(*s, "while true do end");
  CHECK_FALSE(o.ok);
  CHECK(o.text.find("t.lua:1: instruction limit") == 0);
  CHECK(s->limit_hit() == LimitHit::kInstructions);
}

TEST_CASE("time limit stops loops, and pcall cannot swallow it") {
  LuaLimits limits;
  limits.cpu_seconds = 0.2;
  for (const char* code :
       {"while true do end", "while true do pcall(function() while true do end end) end",
        "coroutine.wrap(function() while true do end end)()",
        "local n = 0 while true do n = n + #tostring(n) end"}) {
    CAPTURE(code);
    auto s = LuaState::Create(limits);
    auto t0 = std::chrono::steady_clock::now();
    Outcome o = RunCode(*s, code);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CAPTURE(o.text);
    CHECK_FALSE(o.ok);
    CHECK(o.text.find("time limit") != std::string::npos);
    CHECK(secs < 60.0);  // it stopped: a bound on a hang, not on speed
  }
}

TEST_CASE("limits end loops in message handlers, whether the thread can yield or not") {
  LuaLimits limits;
  limits.cpu_seconds = 0.2;
  for (const char* code : {"xpcall(error, function() while true do end end) return 'escaped'",
                           "while true do xpcall(function() while true do end end, "
                           "function() while true do end end) end",
                           "local function f(n) if n == 0 then while true do end end "
                           "pcall(f, n - 1) pcall(f, n - 1) end f(40)",
                           "table.sort({3, 2, 1}, function() while true do end end)"}) {
    for (bool yieldable : {true, false}) {
      CAPTURE(code);
      CAPTURE(yieldable);
      auto s = LuaState::Create(limits);
      auto t0 = std::chrono::steady_clock::now();
      Outcome o = yieldable ? RunCode(*s, code) : RunPcall(*s, code);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CHECK_FALSE(o.ok);
      CHECK(s->limit_hit() == LimitHit::kTime);
      CHECK(std::string(s->limit_error()).find("t.lua:1: time limit") == 0);
      CHECK(secs < 60.0);  // it stopped: a bound on a hang, not on speed
    }
  }
}

TEST_CASE("time outside slices is not counted") {
  LuaLimits limits;
  limits.cpu_seconds = 60;  // never reached: only what is counted is checked
  auto s = LuaState::Create(limits);
  // Short slices with sleeps between them: the count is at most the time
  // spent inside the runs, which leaves the sleeps out, however slow the
  // machine is.
  double inside = 0;
  for (int i = 0; i < 5; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(RunCode(*s, "local x = 0 for i = 1, 1000 do x = x + i end return x").ok);
    inside += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  CHECK(s->cpu_seconds_used() > 0);
  CHECK(s->cpu_seconds_used() <= inside);
}

TEST_CASE("the clock runs for the host's work, not while it waits") {
  LuaLimits limits;
  limits.cpu_seconds = 60;
  auto s = LuaState::Create(limits);
  using Clock = std::chrono::steady_clock;
  auto sleep_ms = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
  sleep_ms(30);  // before any work: not counted
  const auto t0 = Clock::now();
  s->BeginWork();
  sleep_ms(50);  // host work between slices: counted
  s->BeginWait();
  sleep_ms(200);  // waiting for the model: not counted
  s->EndWait();
  CHECK(RunCode(*s, "return 1").ok);  // a slice inside the work nests
  s->EndWork();
  const double inside = std::chrono::duration<double>(Clock::now() - t0).count();
  sleep_ms(30);  // after: not counted
  // Bounds that hold however slow the machine: at least the work slept,
  // at most what passed between BeginWork and EndWork less the wait.
  CHECK(s->cpu_seconds_used() >= 0.05);
  CHECK(s->cpu_seconds_used() <= inside - 0.2);
}

// A C function that takes 20 ms and returns a 1 MiB string, like a slow
// string.rep: no count hook fires inside it. Its frame holds no object with
// a destructor (the host section rule): lua_pushlstring raises when a limit
// strikes at its allocation.
int SlowBigString(lua_State* L) {
  static const std::string big(size_t{1} << 20, 'x');
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  lua_pushlstring(L, big.data(), big.size());
  return 1;
}

TEST_CASE("time in C functions is caught at their large allocations") {
  LuaLimits limits;
  limits.cpu_seconds = 0.3;
  auto s = LuaState::Create(limits);
  lua_register(s->L(), "slow", SlowBigString);
  // 100 calls are 2 s in C and some 500 instructions, too few for the count
  // hook; pcall cannot hide the limit either.
  const auto t0 = std::chrono::steady_clock::now();
  Outcome o = RunCode(*s,
                      "local n = 0 for i = 1, 100 do if pcall(slow) then n = n + 1 end end "
                      "return n");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("stopped after " << secs << " s (limit 0.3 s)");
  CHECK_FALSE(o.ok);
  CHECK(s->limit_hit() == LimitHit::kTime);
  CHECK(o.text.find("time limit") != std::string::npos);
  CHECK(secs < 60.0);  // a bound on a hang, not on speed
}

TEST_CASE("an external interrupt flag stops a busy script") {
  std::atomic<bool> flag{true};
  auto s = LuaState::Create({});
  s->SetInterruptFlag(&flag);
  Outcome o = RunCode(*s, "while true do end");
  CHECK_FALSE(o.ok);
  CHECK(o.text.find("interrupted") != std::string::npos);
}

TEST_CASE("deep recursion is a clean error") {
  ExpectError("local function f(n) return 1 + f(n + 1) end return f(1)", "stack overflow");
  // Redis CVE-2025-46817 style: unpack with a huge range.
  ExpectError("return table.unpack({}, 1, 1e8)", "too many results");
}

TEST_CASE("print goes to the logger") {
  auto s = LuaState::Create({});
  std::vector<std::string> lines;
  s->SetLogger([&](std::string_view l) { lines.emplace_back(l); });
  CHECK(RunCode(*s, "print('a', 1, nil, true)").ok);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "a\t1\tnil\ttrue");
}

TEST_CASE("host yields pass through script coroutines") {
  auto s = LuaState::Create({});
  lua_State* L = s->L();
  // A host function that yields the tag, as get does.
  lua_pushlightuserdata(L, LuaState::HostYieldTag());
  lua_pushcclosure(
      L,
      [](lua_State* L) -> int {
        lua_pushvalue(L, lua_upvalueindex(1));
        return lua_yield(L, 1);
      },
      1);
  lua_setglobal(L, "host_wait");
  REQUIRE(s->LoadText(
      "local log = {}\n"
      "local co = coroutine.wrap(function() log[#log+1] = 'a'; host_wait(); log[#log+1] = 'b'; "
      "coroutine.yield('user'); log[#log+1] = 'c' end)\n"
      "local r = co()\n"
      "log[#log+1] = r\n"
      "co()\n"
      "return table.concat(log, ',')",
      "t.lua"));
  lua_State* co = lua_newthread(L);
  lua_insert(L, -2);
  lua_xmove(L, co, 1);
  int nres = 0;
  int st = lua_resume(co, L, 0, &nres);
  // The host wait reached us (the outermost coroutine), not the script's.
  REQUIRE(st == LUA_YIELD);
  REQUIRE(nres == 1);
  CHECK(lua_touserdata(co, -1) == LuaState::HostYieldTag());
  lua_pop(co, nres);
  st = lua_resume(co, L, 0, &nres);
  REQUIRE(st == LUA_OK);
  CHECK(std::string(lua_tostring(co, -1)) == "a,b,user,c");
}

}  // namespace
}  // namespace braid::lua
