// The sandbox's pattern functions (lua_string_lib.cpp on lua_patterns.cpp)
// against Lua 5.4's own string library, which nobody here wrote: every
// result and every error message must be the same. Then the reason they
// exist: a backtracking pattern is stopped by the time, instruction and
// interrupt limits, and pcall cannot catch the stop.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

#include "lua/lua_patterns.h"
#include "lua/lua_state.h"

namespace braid::lua {
namespace {

// Runs find, match, gmatch and gsub (with several init values and every kind
// of replacement) on the subject and pattern given as arguments; returns one
// line per call: the pcall status and each result's type and value.
const char* kBattery = R"lua(
local s, p = ...
local out = {}
local function rec(...)
  local t = {}
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    t[i] = type(v) .. ':' .. tostring(v)
  end
  out[#out + 1] = table.concat(t, ' ')
end
local function try(f, ...) rec(pcall(f, ...)) end
local function gm(init)
  return function()
    local r = {}
    for a, b, c in string.gmatch(s, p, init) do
      r[#r + 1] = tostring(a) .. '|' .. tostring(b) .. '|' .. tostring(c)
      if #r > 100 then break end
    end
    return table.concat(r, ',')
  end
end
for _, init in ipairs({1, 2, 0, -1, -3, -100, #s, #s + 1, #s + 2}) do
  try(string.find, s, p, init)
  try(string.match, s, p, init)
  try(gm(init))
end
try(string.find, s, p, 1, true)
try(string.find, s, p, 2, 1)
try(function() return s:find(p) end)
try(function() return s:match(p) end)
try(gm(nil))
try(string.gsub, s, p, '<%0>')
try(string.gsub, s, p, '%1-%%')
try(string.gsub, s, p, '[%2]')
try(string.gsub, s, p, '%')
try(string.gsub, s, p, '%x')
try(string.gsub, s, p, 7)
try(string.gsub, s, p, 'r', 0)
try(string.gsub, s, p, 'r', 2)
try(string.gsub, s, p, 'r', -1)
try(string.gsub, s, p, function(...)
  local t = {select('#', ...)}
  for i = 1, select('#', ...) do t[#t + 1] = tostring((select(i, ...))) end
  return table.concat(t, '.')
end)
try(string.gsub, s, p, function(a) if a == 'a' then return false end return 1.5 end)
try(string.gsub, s, p, function() return {} end)
try(string.gsub, s, p, {a = 'A', b = false, ['1'] = 'one', [''] = 'empty'})
try(string.gsub, s, p, setmetatable({}, {__index = function(_, k) return '{' .. tostring(k) .. '}' end}))
try(string.gsub, s, p)
try(function() return s:gsub(p, '%0%0') end)
return table.concat(out, '\n')
)lua";

// The battery's output in state L (plain Lua or the sandbox).
std::string RunBattery(lua_State* L, const std::string& s, const std::string& p) {
  REQUIRE(luaL_loadbufferx(L, kBattery, std::char_traits<char>::length(kBattery), "=battery",
                           "t") == LUA_OK);
  lua_pushlstring(L, s.data(), s.size());
  lua_pushlstring(L, p.data(), p.size());
  int st = lua_pcall(L, 2, 1, 0);
  size_t len = 0;
  const char* t = lua_tolstring(L, -1, &len);
  std::string out = (st == LUA_OK ? "" : "battery failed: ") + std::string(t ? t : "?", len);
  lua_pop(L, 1);
  return out;
}

struct Case {
  std::string subject;
  std::string pattern;
};

std::vector<Case> Cases() {
  std::vector<Case> c = {
      // plain text, anchors, '.'
      {"hello world", "o"},
      {"hello world", "o w"},
      {"hello", ""},
      {"", ""},
      {"", "a"},
      {"", "^$"},
      {"hello", "^h"},
      {"hello", "^e"},
      {"hello", "o$"},
      {"hello", "l$"},
      {"a$b", "$b"},
      {"a$b", "a$"},
      {"hello", "^hello$"},
      {"hello", "h.l"},
      {"hello", "....."},
      {"hi", "..."},
      {"a^b", "a^b"},
      {"^a", "^^a"},
      {"a.b", "a.b"},
      {"a.b", "%."},
      {"abc", "%a+"},
      {"a\0b", std::string("\0", 1)},
      {std::string("a\0b\0", 4), "%z"},
      {std::string("a\0b\0", 4), "%Z+"},
      {"x", "%q"},
      // classes and complements
      {"abc123 DEF_!?\t\n", "%a+"},
      {"abc123 DEF_!?\t\n", "%A+"},
      {"abc123 DEF_!?\t\n", "%d+"},
      {"abc123 DEF_!?\t\n", "%D+"},
      {"abc123 DEF_!?\t\n", "%l+"},
      {"abc123 DEF_!?\t\n", "%u+"},
      {"abc123 DEF_!?\t\n", "%s+"},
      {"abc123 DEF_!?\t\n", "%S+"},
      {"abc123 DEF_!?\t\n", "%w+"},
      {"abc123 DEF_!?\t\n", "%W+"},
      {"abc123 DEF_!?\t\n", "%p+"},
      {"abc123 DEF_!?\t\n", "%P+"},
      {"abc123 DEF_!?\t\n", "%c+"},
      {"abc123 DEF_!?\t\n", "%C+"},
      {"0x1F zz", "%x+"},
      {"0x1F zz", "%X+"},
      {"a b\tc", "%g+"},
      {"a b\tc", "%G+"},
      {"\x80\xff abc", "[\x80-\xff]+"},
      {"\x80\xff abc", "[^\x80-\xff]+"},
      // sets
      {"hello world", "[aeiou]+"},
      {"hello world", "[^aeiou ]+"},
      {"a-b", "[a-]+"},
      {"a-b", "[-a]+"},
      {"a]b", "[]]"},
      {"a]b", "[^]]+"},
      {"a]b", "[%]]"},
      {"a%b", "[%%]"},
      {"a^b", "[b^]+"},
      {"abc", "[^^]+"},
      {"x1y2", "[%d%a]+"},
      {"x1y2", "[%D]"},
      {"a-z", "[z-a]"},
      {"abcxyz", "[a-c-x]+"},
      {"a", "[a"},
      {"a", "[a%"},
      {"a", "[%"},
      {"a", "["},
      {"a", "[^"},
      {"a", "[]"},
      {"a", "[^]"},
      {"abc", "[a-]"},
      {"a-", "[%a-]+"},
      // quantifiers
      {"aaab", "a*"},
      {"aaab", "a+"},
      {"aaab", "a-"},
      {"aaab", "a-b"},
      {"aaab", "a?"},
      {"aaab", "a?a?b"},
      {"b", "a+"},
      {"b", "a*b"},
      {"<a><b>", "<.->"},
      {"<a><b>", "<.*>"},
      {"abc", "*"},
      {"abc", "+a"},
      {"a+b", "a+b"},
      {"a+b", "a%+b"},
      {"abc", "a-?"},
      {"aaa", "a**"},
      {"  x  ", "^%s*(.-)%s*$"},
      {"key = value", "(%w+)%s*=%s*(%w+)"},
      {"2024-01-31", "(%d+)-(%d+)-(%d+)"},
      // captures
      {"hello world", "(o)"},
      {"hello world", "()o()"},
      {"hello", "()"},
      {"hello", "(h)(e)(l)(l)(o)"},
      {"hello", "((l)(l))"},
      {"abc", "(a(b)c)"},
      {"abc", "(a"},
      {"abc", "a)"},
      {"abc", "(()"},
      {"abc", "(a)()"},
      {"abc", ")"},
      {"abc", "()a"},
      {"abc", "(a)(b"},
      {"abc", "((a)"},
      {"a", std::string(32, '(') + "a" + std::string(32, ')')},
      {"a", std::string(33, '(') + "a" + std::string(33, ')')},
      // back references
      {"hello", "(l)%1"},
      {"abab", "(ab)%1"},
      {"abba", "(a)(b)%2%1"},
      {"aa", "%1"},
      {"aa", "(a)%2"},
      {"aa", "(a%1)"},
      {"aa", "%0"},
      {"aa", "()%1"},
      {"x = 'q' y", "(['\"])(.-)%1"},
      // balance and frontier
      {"f(a(b)c) d", "%b()"},
      {"f(a(b)c d", "%b()"},
      {"x''y", "%b''"},
      {"x", "%b"},
      {"x", "%bx"},
      {"THE (quick) fox", "%f[%a]%a+"},
      {"THE (quick) fox", "%f[%A]"},
      {"hello", "%f[%l]"},
      {"hello", "%f"},
      {"hello", "%fx"},
      {"hello", "%f[a"},
      {"aXb", "%f[%u]."},
      {"abc", "%f[^%z]"},
      {"abc", "%f[%z]"},
      // escapes and malformed patterns
      {"a%", "%%"},
      {"a", "%"},
      {"a", "a%"},
      {"b", "a%"},
      {"a", "%g%"},
      {"%", "[%%]"},
      {"a.b", "%.%"},
      // depth bound
      {std::string(300, 'a'),
       [] {
         std::string p;
         for (int i = 0; i < 300; ++i) p += "a?";
         return p;
       }()},
      {std::string(150, 'a'),
       [] {
         std::string p;
         for (int i = 0; i < 150; ++i) p += "a?";
         return p;
       }()},
      {std::string(250, 'a'), "(" + std::string(250, 'a') + ")"},
      {std::string(20, 'a'), "a-a-a-a-b"},
      // numbers as subject and pattern are coerced
      {"12345", "%d%d"},
  };
  return c;
}

struct States {
  lua_State* plain = nullptr;
  std::unique_ptr<LuaState> sandbox;
  States() {
    plain = luaL_newstate();
    luaL_openlibs(plain);
    sandbox = LuaState::Create({});
  }
  ~States() { lua_close(plain); }
};

TEST_CASE("find, match, gmatch and gsub agree with Lua 5.4's string library") {
  States st;
  REQUIRE(st.sandbox);
  // The sandbox really runs its own functions, not Lua's.
  lua_getglobal(st.sandbox->L(), "string");
  lua_getfield(st.sandbox->L(), -1, "find");
  lua_CFunction ours = lua_tocfunction(st.sandbox->L(), -1);
  lua_getglobal(st.plain, "string");
  lua_getfield(st.plain, -1, "find");
  lua_CFunction theirs = lua_tocfunction(st.plain, -1);
  CHECK((ours != nullptr && theirs != nullptr && ours != theirs));
  lua_pop(st.sandbox->L(), 2);
  lua_pop(st.plain, 2);
  int n = 0;
  for (const Case& c : Cases()) {
    CAPTURE(c.subject);
    CAPTURE(c.pattern);
    std::string want = RunBattery(st.plain, c.subject, c.pattern);
    std::string got = RunBattery(st.sandbox->L(), c.subject, c.pattern);
    CHECK(got == want);
    ++n;
  }
  CHECK(n > 100);
}

TEST_CASE("argument errors and coercions agree with Lua 5.4") {
  States st;
  const char* programs[] = {
      "return string.find()",
      "return string.find('a')",
      "return string.find('a', {})",
      "return string.find(123, 2)",
      "return string.find('abc', 'b', 'x')",
      "return string.find('abc', 'b', 1.5)",
      "return string.match(nil, 'a')",
      "return string.gmatch('a')",
      "return string.gmatch('abc', '.', {})",
      "return string.gsub('abc', 'b', true)",
      "return string.gsub('abc', 'b', 'x', 'y')",
      "return string.gsub('abc', 'b', nil)",
      "return string.gsub(42, 4, 5)",
      "return ('abc'):gsub('', '-')",
      "return string.gsub('abc', '%w', '%1%1')",
      "return string.gsub('hello world', '(%w+)', '<%1>')",
      "return string.gsub('abc', '', '-', 2)",
      "return string.gsub('abc', '.', {a = 1, b = 2.5})",
      "return string.gsub('$name is $age', '%$(%w+)', {name = 'Ann', age = 7})",
      "local t = {} for k, v in string.gmatch('a=1, b=2', '(%w+)=(%w+)') do t[#t+1] = k .. v end "
      "return table.concat(t)",
      "local t = {} for w in ('one two three'):gmatch('%a+', -5) do t[#t+1] = w end return "
      "table.concat(t, ',')",
      "local f = string.gmatch('abc', '.') return f(), f(), f(), f(), f()",
      "local f = string.gmatch('abc', '(') return f()",
      "return string.find('a' .. string.rep('b', 10000), 'a(b*)$') ~= nil",
      "return string.gsub(string.rep('ab', 1000), 'a', function() return nil end) == "
      "string.rep('ab', 1000)",
      "return select('#', string.find('abc', '()a()b()c()'))",
      "return string.gsub('abc', 'b', function() error('boom') end)",
      "return string.gsub('abc', 'b', function() error({}) end)",
  };
  for (const char* code : programs) {
    CAPTURE(code);
    std::string results[2];
    lua_State* states[2] = {st.plain, st.sandbox->L()};
    for (int i = 0; i < 2; ++i) {
      lua_State* L = states[i];
      REQUIRE(luaL_loadbufferx(L, code, std::char_traits<char>::length(code), "=code", "t") ==
              LUA_OK);
      int top = lua_gettop(L) - 1;
      int status = lua_pcall(L, 0, LUA_MULTRET, 0);
      std::string r = status == LUA_OK ? "ok" : "error";
      for (int j = top + 1; j <= lua_gettop(L); ++j) {
        r += " ";
        r += luaL_typename(L, j);
        r += ":";
        if (lua_type(L, j) != LUA_TTABLE) r += luaL_tolstring(L, j, nullptr), lua_pop(L, 1);
      }
      lua_settop(L, top);
      results[i] = r;
    }
    CHECK(results[1] == results[0]);
  }
}

TEST_CASE("the matcher asks its callback every kPatternCheckEvery steps and stops when told") {
  std::string subject(30, 'a');
  subject += "b";
  std::string pattern;
  for (int i = 0; i < 30; ++i) pattern += "a*";
  pattern += "c";
  struct Counter {
    uint64_t steps = 0;
    int calls = 0;
  } counter;
  PatternStepCallback cb{[](void* ctx, uint64_t steps) {
                           auto* c = static_cast<Counter*>(ctx);
                           c->steps += steps;
                           return ++c->calls == 50;
                         },
                         &counter};
  PatternMatcher m(subject, pattern, cb);
  CHECK(m.MatchAt(0) == MatchStatus::kStopped);
  CHECK(counter.calls == 50);
  CHECK(counter.steps == 50 * kPatternCheckEvery);
  CHECK(m.steps() == counter.steps);

  // Without a callback a small match runs to its end.
  PatternMatcher small("key=value", "(%w+)=(%w+)");
  REQUIRE(small.MatchAt(0) == MatchStatus::kMatch);
  CHECK(small.end() == 9);
  CHECK(small.capture_count() == 2);
  PatternCapture c;
  REQUIRE(small.GetCapture(1, 0, &c));
  CHECK(c.start == 4);
  CHECK(c.len == 5);
  CHECK_FALSE(small.GetCapture(2, 0, &c));
  CHECK(std::string(small.error()) == "invalid capture index %3");
}

// ---- limits ------------------------------------------------------------------

// string.find(string.rep("a", 30) .. "b", string.rep("a*", 30) .. "c") takes
// about 30^30 / 30! steps: it never ends by itself.
const char* kCatastrophic =
    "local s, p = string.rep('a', 30) .. 'b', string.rep('a*', 30) .. 'c'\n";

struct Outcome {
  int status = LUA_OK;
  std::string text;
};

// Runs `code` as chunk "t.lua" in one time slice: in a coroutine the host
// resumes (it yields for good at a limit), or under lua_pcall on the main
// thread, which cannot yield (a limit raises an error no handler sees).
Outcome Run(LuaState& s, const std::string& code, bool yieldable) {
  lua_State* L = s.L();
  REQUIRE(s.LoadText(code, "t.lua"));
  Outcome o;
  if (yieldable) {
    lua_State* co = lua_newthread(L);
    lua_insert(L, -2);
    lua_xmove(L, co, 1);
    int nres = 0;
    s.BeginSlice(co);
    o.status = lua_resume(co, L, 0, &nres);
    s.EndSlice();
    const char* t = lua_gettop(co) > 0 ? lua_tostring(co, -1) : nullptr;
    o.text = t ? t : "";
    lua_pop(L, 1);
  } else {
    s.BeginSlice(L);
    o.status = lua_pcall(L, 0, 1, 0);
    s.EndSlice();
    const char* t = lua_tostring(L, -1);
    o.text = t ? t : "";
    lua_pop(L, 1);
  }
  return o;
}

const char* kLimitPrograms[] = {
    "return string.find(s, p)",
    "return s:find(p)",
    "return string.match(s, p)",
    "for x in string.gmatch(s, p) do end",
    "return string.gsub(s, p, 'x')",
    "local ok = pcall(string.find, s, p) return 'escaped'",
    "while true do pcall(string.match, s, p) end",
    "local ok = pcall(function() return s:gsub(p, '') end) return 'escaped'",
    "return string.gsub('ab', '.', function() return pcall(string.find, s, p) and 'escaped' end)",
    "xpcall(string.find, function() while true do end end, s, p) return 'escaped'",
};

void ExpectStopped(LuaState& s, const std::string& code, bool yieldable, LimitHit hit,
                   const char* message) {
  CAPTURE(code);
  CAPTURE(yieldable);
  auto t0 = std::chrono::steady_clock::now();
  Outcome o = Run(s, kCatastrophic + code, yieldable);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAPTURE(o.text);
  // Stopped: yielded for good, or an error; never a result.
  CHECK(o.status != LUA_OK);
  CHECK(o.text.find("escaped") == std::string::npos);
  CHECK(s.limit_hit() == hit);
  CHECK(std::string(s.limit_error()).find(message) != std::string::npos);
  CHECK(std::string(s.limit_error()).find("t.lua:") == 0);
  CHECK(secs < 60.0);  // it stopped: a bound on a hang, not on speed
}

TEST_CASE("a catastrophic pattern is stopped by the time limit, and pcall cannot catch it") {
  LuaLimits limits;
  limits.cpu_seconds = 0.5;
  for (const char* code : kLimitPrograms) {
    for (bool yieldable : {true, false}) {
      auto s = LuaState::Create(limits);
      ExpectStopped(*s, code, yieldable, LimitHit::kTime, "time limit");
    }
  }
}

TEST_CASE("a catastrophic pattern is stopped by the instruction limit") {
  LuaLimits limits;
  limits.cpu_seconds = 0;
  limits.max_instructions = 2000000;
  for (const char* code : kLimitPrograms) {
    for (bool yieldable : {true, false}) {
      auto s = LuaState::Create(limits);
      ExpectStopped(*s, code, yieldable, LimitHit::kInstructions, "instruction limit");
      CHECK(s->instructions_used() > limits.max_instructions);
    }
  }
}

TEST_CASE("a catastrophic pattern is stopped by an interrupt from another thread") {
  LuaLimits limits;
  limits.cpu_seconds = 0;
  for (bool yieldable : {true, false}) {
    auto s = LuaState::Create(limits);
    LuaState* raw = s.get();
    std::thread stopper([raw] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      raw->Interrupt();
    });
    ExpectStopped(*s, "local ok = pcall(string.find, s, p) return 'escaped'", yieldable,
                  LimitHit::kInterrupted, "interrupted");
    stopper.join();
  }
}

TEST_CASE("pattern steps count as instructions, so ordinary matches stay within the limits") {
  auto s = LuaState::Create({});
  Outcome o = Run(*s, "return (string.rep('ab', 100000):gsub('b', 'c'))", true);
  CHECK(o.status == LUA_OK);
  CHECK(o.text.size() == 200000);
  // One step per subject position at least, charged kPatternCheckEvery at a time.
  CHECK(s->instructions_used() >= 200000 / kPatternCheckEvery * kPatternCheckEvery);
  CHECK(s->limit_hit() == LimitHit::kNone);
}

}  // namespace
}  // namespace braid::lua
