// The driver and the braid module against a fake rt::Run whose "model"
// answers instantly and deterministically: output `o` of a call becomes
// "o[input1|input2|...]". The fake executes one level of wanted, ready nodes
// per WaitAny, so tests see that the DAG is built before anything runs and
// that goals reach the runtime through Want.
#include "lua/driver.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lua/fake_run.h"

namespace braid::lua {
namespace {

using rt::VarId;
using rt::VarState;

using testing::FakeRun;

Result<ProgramResult> RunLua(FakeRun& run, const std::string& code,
                             std::vector<std::string> args = {}, DriverOptions options = {}) {
  return RunProgram(run, "app.lua", code, args, options);
}

std::string Text(const Result<ProgramResult>& r) {
  if (!r.ok()) return "ERROR: " + r.status().message();
  return r->text;
}

const char* kMapReduce = R"lua(
local summarize = braid.fn { name = "summarize", prompt = [[
Summarize: {{chunk}}
Summary: {{gen summary max_tokens=16}}]] }
local combine = braid.fn { name = "combine", system = "You write abstracts.", prompt = [[
{{parts}}
Abstract: {{gen abstract max_tokens=32}}]] }

return function(doc)
  local parts = {}
  for i, chunk in ipairs(braid.chunks(doc, { chars = 12 })) do
    parts[i] = summarize{ chunk = chunk }.summary
  end
  local out = combine{ parts = braid.join(parts, "+") }.abstract
  return out:get{ criteria = "latency" }
end
)lua";

TEST_CASE("map-reduce: the whole DAG is built before anything waits; the goal reaches Want") {
  FakeRun run;
  auto r = RunLua(run, kMapReduce, {"alpha beta. gamma delta. epsilon"});
  REQUIRE_MESSAGE(r.ok(), Text(r));
  CHECK(r->kind == ProgramResult::Kind::kString);
  CHECK(r->text == "abstract[summary[alpha beta.]+summary[gamma delta.]+summary[epsilon]]");
  CHECK(run.calls_before_first_wait == 4);  // 3 summaries and the combine
  REQUIRE(run.wants.size() == 1);
  CHECK(run.wants[0].second.criteria == rt::Criteria::kLatency);
  CHECK(run.keys == std::vector<std::string>{"main#0", "main#1", "main#2", "main#3"});
}

TEST_CASE("spawned coroutines run concurrently and join with their values") {
  FakeRun run;
  auto r = RunLua(run, R"lua(
local f = braid.fn { name = "f", prompt = "{{x}} {{gen y}}" }
local hs = {}
for i = 1, 3 do
  hs[i] = braid.spawn(function(n)
    local a = f{ x = "a" .. n }.y:get()
    local b = f{ x = a }.y:get()
    return b, n
  end, i)
end
local out = {}
for i, h in ipairs(hs) do
  local v, n = h:join()
  out[#out + 1] = v .. "/" .. n
end
return out
)lua");
  REQUIRE_MESSAGE(r.ok(), Text(r));
  CHECK(r->kind == ProgramResult::Kind::kJson);
  CHECK(r->text == R"(["y[y[a1]]/1","y[y[a2]]/2","y[y[a3]]/3"])");
  // Interleaved: the three first-level calls were made before any second level.
  REQUIRE(run.keys.size() == 6);
  CHECK(std::set<std::string>(run.keys.begin(), run.keys.begin() + 3) ==
        std::set<std::string>{"main/1#0", "main/2#0", "main/3#0"});
  CHECK(std::set<std::string>(run.keys.begin() + 3, run.keys.end()) ==
        std::set<std::string>{"main/1#1", "main/2#1", "main/3#1"});
}

TEST_CASE("braid.map runs a Lua function on a variable's value") {
  FakeRun run;
  auto r = RunLua(run, R"lua(
local f = braid.fn { name = "f", prompt = "{{x}} {{gen y}}" }
local v = f{ x = "hi" }.y
local up = braid.map(v, function(s) return s:upper() end)
local g = f{ x = up }.y
return { up = up, g = g:get(), n = 3 }
)lua");
  REQUIRE_MESSAGE(r.ok(), Text(r));
  CHECK(r->text == R"({"g":"y[Y[HI]]","n":3,"up":"Y[HI]"})");
}

TEST_CASE("a failed variable raises where get is called; pcall can handle it") {
  FakeRun run;
  auto r = RunLua(run,
                  "local f = braid.fn { name = 'fail', prompt = '{{gen y}}' }\n"
                  "local v = f{}.y\n"
                  "local ok, err = pcall(function() return v:get() end)\n"
                  "assert(not ok)\n"
                  "return err");
  REQUIRE_MESSAGE(r.ok(), Text(r));
  CHECK(r->text == "app.lua:3: fail.y failed: boom from the engine");

  FakeRun run2;
  auto e = RunLua(run2,
                  "local f = braid.fn { name = 'fail', prompt = '{{gen y}}' }\n"
                  "return f{}.y:get()\n");
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().rfind(
            "app.lua:2: fail.y failed: boom from the engine\nstack traceback:", 0) == 0);
}

TEST_CASE("bad programs: clear errors naming file:line") {
  struct Case {
    const char* code;
    const char* prefix;
  } cases[] = {
      {"local x = \nreturn (", "app.lua:2:"},
      {"local t = nil\nreturn t.x", "app.lua:2: attempt to index a nil value (local 't')"},
      {"local f = braid.fn [[{{chunk}} {{gen s}}]]\nreturn f{ chunkk = 'x' }",
       "app.lua:2: fn@app.lua:1: unknown input 'chunkk' (its inputs: chunk)"},
      {"local f = braid.fn { name = 'g', prompt = '{{a}} {{gen s}}' }\nreturn f{}",
       "app.lua:2: g: missing input 'a'"},
      {"local f = braid.fn { name = 'g', prompt = '{{a}} {{gen s}}' }\nreturn f{ a = {} }",
       "app.lua:2: g: input 'a' must be a string or a braid variable, got table"},
      {"\nlocal f = braid.fn { prompt = '{{gen s max_token=3}}' }", "app.lua:2: braid.fn: "},
      {"local f = braid.fn { promt = 'x' }", "app.lua:1: braid.fn: unknown field 'promt'"},
      {"local f = braid.fn { name = 'g', prompt = '{{gen s}}' }\nreturn f{}.s:get{ criteria = "
       "'fast' }",
       "app.lua:2: get: criteria must be"},
      {"local f = braid.fn { name = 'g', prompt = '{{gen s}}' }\nreturn 'a' .. f{}.s",
       "app.lua:2: cannot concatenate a braid variable"},
      {"return braid.chunks('x', { tokens = 0 })",
       "app.lua:1: braid.chunks: tokens must be a positive integer"},
      {"return braid.join({ 'a', 3, {} })", "app.lua:1: braid.join: item 3 must be"},
      {"return io.open('x')", "app.lua:1: 'io' is not available in the Braid sandbox"},
      {"return function() return print end", "the result is a function, which has no JSON form"},
      {"local f = braid.fn { prompt = '{{gen a}}', messages = 'hi' }",
       "app.lua:1: braid.fn: field 'messages' must be a list of {role=, content=} tables, got "
       "string"},
      {"local f = braid.fn { prompt = '{{gen a}}', messages = { role = 'user', content = 'x' } }",
       "app.lua:1: braid.fn: field 'messages' must be a list of {role=, content=} tables, but it "
       "has the key '"},
      {"local f = braid.fn { prompt = '{{gen a}}', messages = { { role = 'user', content = 'x' }, "
       "'y' } }",
       "app.lua:1: braid.fn: messages[2] must be a table {role=, content=}, got string"},
      {"local f = braid.fn { prompt = '{{gen a}}', messages = { { role = 'bot', content = 'x' } } "
       "}",
       "app.lua:1: braid.fn: messages[1]: role 'bot' is not one of system, user, assistant"},
      {"local f = braid.fn { prompt = '{{gen a}}', messages = { { role = 'user' } } }",
       "app.lua:1: braid.fn: messages[1]: 'content' must be a string, got nil"},
      {"local f = braid.fn { prompt = '{{gen a}}', messages = { { role = 1, content = 'x' } } }",
       "app.lua:1: braid.fn: messages[1]: 'role' must be a string, got number"},
      {"local f = braid.fn { prompt = '{{gen a}}', messages = { { role = 'user', content = 'x', "
       "name = 'n' } } }",
       "app.lua:1: braid.fn: messages[1]: unknown field 'name' (fields: role, content)"},
      {"local f = braid.fn { name = 'g', prompt = '{{gen a}}', messages = {\n"
       "  { role = 'user', content = 'ok' }, { role = 'assistant', content = 'A: {{gen b}}' } } }",
       "app.lua:1: braid.fn: g: messages[2]:1:4: an output ({{gen b ...}}) cannot be in a message"},
      {"local f = braid.fn { name = 'g', system = 's', prompt = '{{gen a}}',\n"
       "  messages = { { role = 'system', content = 't' } } }",
       "app.lua:1: braid.fn: g: messages[1]: a system message and 'system' both given"},
  };
  for (const Case& c : cases) {
    FakeRun run;
    auto r = RunLua(run, c.code);
    CAPTURE(c.code);
    CAPTURE(Text(r));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().rfind(c.prefix, 0) == 0);
  }
}

TEST_CASE(
    "get inside a script's own coroutine reaches the driver; inside table.sort it is refused") {
  FakeRun run;
  auto r = RunLua(run, R"lua(
local f = braid.fn { name = "f", prompt = "{{x}} {{gen y}}" }
local gen = coroutine.wrap(function()
  for i = 1, 2 do coroutine.yield(f{ x = tostring(i) }.y:get()) end
end)
return gen() .. "," .. gen()
)lua");
  REQUIRE_MESSAGE(r.ok(), Text(r));
  CHECK(r->text == "y[1],y[2]");

  FakeRun run2;
  auto e = RunLua(run2, R"lua(
local f = braid.fn { name = "f", prompt = "{{x}} {{gen y}}" }
local vs = { f{ x = "b" }.y, f{ x = "a" }.y }
table.sort(vs, function(a, b) return a:get() < b:get() end)
)lua");
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().find("get: cannot wait here") != std::string::npos);
}

TEST_CASE("args reach braid.args and the main function") {
  FakeRun run;
  auto r = RunLua(
      run, "local first = ...\nreturn function(a, b) return first .. a .. b .. #braid.args end",
      {"x", "y"});
  CHECK(Text(r) == "xxy2");
}

TEST_CASE("os.time, os.clock, os.date and math.random replay on resume") {
  std::map<std::string, std::string> store;
  const char* code = R"lua(
local h = braid.spawn(function() return os.time(), math.random(1000000) end)
local t, r = h:join()
return { t = os.time(), c = os.clock(), d = os.date("%H:%M:%S"), r = math.random(1000000), t2 = t, r2 = r }
)lua";
  FakeRun first(&store);
  auto a = RunLua(first, code);
  REQUIRE_MESSAGE(a.ok(), Text(a));
  CHECK(store.count("main:os.time#0") == 1);
  CHECK(store.count("main/1:os.time#0") == 1);
  CHECK(store.count("init:math.randomseed#0") == 1);
  // Tamper with the recorded time: the resumed run must see the record.
  store["main:os.time#0"] = "1000";
  FakeRun second(&store);
  auto b = RunLua(second, code);
  REQUIRE(b.ok());
  CHECK(b->text.find("\"t\":1000") != std::string::npos);
  FakeRun third(&store);
  auto c = RunLua(third, code);
  CHECK(Text(b) == Text(c));
}

TEST_CASE("braid.fn messages: earlier turns whose inputs are the function's inputs") {
  FakeRun run;
  auto r = RunLua(run, R"lua(
local ask = braid.fn { name = "ask", prompt = "{{q}} {{gen a}}", messages = {
  { role = "system", content = "You know {{topic}}." },
  { role = "user", content = "Hello." },
  { role = "assistant", content = "Ask away." },
} }
local ok, err = pcall(function() return ask{ q = "Why?" } end)
return ask{ q = "Why?", topic = "cats" }.a:get() .. " | " .. err
)lua");
  REQUIRE_MESSAGE(r.ok(), Text(r));
  // The fake answers "a[<inputs in the function's order>]": the message's input first.
  CHECK(r->text == "a[cats|Why?] | app.lua:7: ask: missing input 'topic'");
}

TEST_CASE("braid.now: wall-clock seconds with a fraction, replayed on resume") {
  std::map<std::string, std::string> store;
  const char* code = R"lua(
local a = braid.now()
local h = braid.spawn(function() return braid.now() end)
local c = h:join()
local b = braid.now()
assert(math.type(a) == "float" and b >= a)
return { a = a, b = b, c = c }
)lua";
  FakeRun first(&store);
  auto r = RunLua(first, code);
  REQUIRE_MESSAGE(r.ok(), Text(r));
  REQUIRE(store.count("main:braid.now#0") == 1);
  CHECK(store.count("main:braid.now#1") == 1);
  CHECK(store.count("main/1:braid.now#0") == 1);
  const double a = std::strtod(store["main:braid.now#0"].c_str(), nullptr);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(a <= now);
  CHECK(a > now - 60);
  CHECK(a != std::floor(a));  // sub-second precision (a whole second: a one in a million chance)
  // Tamper with the record: the resumed run must see it.
  store["main:braid.now#0"] = "1234.5";
  FakeRun second(&store);
  auto b = RunLua(second, code);
  REQUIRE_MESSAGE(b.ok(), Text(b));
  CHECK(b->text.find("\"a\":1234.5") != std::string::npos);
  FakeRun third(&store);
  CHECK(Text(RunLua(third, code)) == Text(b));
}

TEST_CASE("v:scores() waits like get and returns each choice's log-probability") {
  FakeRun run;
  auto r = RunLua(run, R"lua(
local f = braid.fn { name = "f", prompt = [[{{x}} {{gen why}} {{select pick choices=["yes", "no"]}}]] }
local o = f{ x = "q" }
local s = o.pick:scores()  -- no get first: scores waits by itself
local ok, err = pcall(function() return o.why:scores() end)
local n = 0
for _ in pairs(s) do n = n + 1 end
return string.format("%s %d %.2f %.2f | %s", o.pick:get(), n, s.yes, s.no, err)
)lua");
  REQUIRE_MESSAGE(r.ok(), Text(r));
  CHECK(r->text ==
        "yes 2 -0.25 -0.50 | app.lua:5: scores: f.why is not a select output (only "
        "{{select ...}} outputs have scores)");
  CHECK(run.wants.size() == 2);  // scores and get wanted pick; why:scores wanted nothing
  CHECK(run.wait_calls >= 1);
}

TEST_CASE("limits inside programs fail the run with a clear error") {
  DriverOptions o;
  o.limits.cpu_seconds = 0.2;
  FakeRun run;
  auto r = RunLua(run, "local h = braid.spawn(function() while true do end end)\nreturn h:join()",
                  {}, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kResourceExhausted);
  CHECK(r.status().message().find("app.lua:1: time limit") == 0);

  DriverOptions m;
  m.limits.memory_bytes = 16 << 20;
  FakeRun run2;
  auto e = RunLua(run2, "local t = {} for i = 1, 1e9 do t[i] = ('x'):rep(64) .. i end", {}, m);
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().code() == StatusCode::kResourceExhausted);
  CHECK(e.status().message().find("memory limit") == 0);
}

TEST_CASE("time blocked waiting for the model is not Lua time") {
  // Six waits of 0.3 s are well past the 1 s limit; the Lua code itself
  // stays far below it even on a slow, loaded machine.
  DriverOptions o;
  o.limits.cpu_seconds = 1.0;
  FakeRun run;
  run.wait_sleep_ms = 300;
  auto r = RunLua(run, R"lua(
local f = braid.fn { name = "f", prompt = "{{x}} {{gen y}}" }
local v = "s"
for i = 1, 6 do v = f{ x = v }.y:get() end
return v
)lua",
                  {}, o);
  REQUIRE_MESSAGE(r.ok(), Text(r));
  CHECK(run.wait_calls >= 6);
}

TEST_CASE("time in host calls counts, however few instructions run between them") {
  // Each call costs the program's thread 20 ms of host work: 100 of them
  // are 2 s, far past the 0.3 s limit, but run fewer Lua instructions than
  // the count hook needs to fire once (each spawned coroutine has a count
  // of its own). The limit is checked at every host call and resume.
  const char* programs[] = {
      // a loop of calls in one coroutine
      "local f = braid.fn { name = 'f', prompt = '{{x}} {{gen y}}' }\n"
      "for i = 1, 100 do f{ x = 'a' } end return 'finished'",
      // many short coroutines, one call each
      "local f = braid.fn { name = 'f', prompt = '{{x}} {{gen y}}' }\n"
      "for i = 1, 100 do braid.spawn(function() f{ x = 'a' } end) end return 'finished'",
  };
  for (const char* code : programs) {
    CAPTURE(code);
    DriverOptions o;
    o.limits.cpu_seconds = 0.3;
    FakeRun run;
    run.call_sleep_ms = 20;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = RunLua(run, code, {}, o);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("stopped after " << secs << " s, " << run.keys.size() << " calls (limit 0.3 s)");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kResourceExhausted);
    CHECK(r.status().message().find("time limit") != std::string::npos);
    CHECK(run.keys.size() < 100);  // stopped before the end
    CHECK(secs < 60.0);            // a bound on a hang, not on speed
  }
}

TEST_CASE("deadlocks and forgotten failures are reported") {
  FakeRun run;
  auto r = RunLua(run, R"lua(
local a, b
a = braid.spawn(function() coroutine.yield() return b:join() end)
b = braid.spawn(function() coroutine.yield() return a:join() end)
return a:join()
)lua");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("deadlock") != std::string::npos);

  FakeRun run2;
  auto e = RunLua(run2, "braid.spawn(function() error('lost') end)\nreturn 'done'");
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().rfind("coroutine main/1 failed and was never joined: app.lua:1: lost",
                                   0) == 0);

  FakeRun run3;
  auto j = RunLua(run3,
                  "local h = braid.spawn(function() error('caught') end)\n"
                  "local ok, err = pcall(function() return h:join() end)\nreturn err");
  CHECK(Text(j) == "app.lua:2: coroutine main/1 failed: app.lua:1: caught");
}

TEST_CASE("independent variables in the result and in get_all are wanted together") {
  FakeRun run;
  auto r = RunLua(run, R"lua(
local f = braid.fn { name = "f", prompt = "{{x}} {{gen y}}" }
return { a = f{ x = "1" }.y, b = { f{ x = "2" }.y } }
)lua");
  REQUIRE_MESSAGE(r.ok(), Text(r));
  CHECK(r->text == R"({"a":"y[1]","b":["y[2]"]})");
  CHECK(run.wait_calls == 1);  // both ran in the first round

  FakeRun run2;
  auto g = RunLua(run2, R"lua(
local f = braid.fn { name = "f", prompt = "{{x}} {{gen y}}" }
local vs = {}
for i = 1, 4 do vs[i] = f{ x = tostring(i) }.y end
return table.concat(braid.get_all(vs, { criteria = "latency" }), ",")
)lua");
  CHECK(Text(g) == "y[1],y[2],y[3],y[4]");
  CHECK(run2.wait_calls == 1);
  REQUIRE(run2.wants.size() >= 4);
  CHECK(run2.wants[0].second.criteria == rt::Criteria::kLatency);
}

TEST_CASE("get_all keeps a table's keys and places a failure at the caller's line") {
  FakeRun run;
  auto r = RunLua(run, R"lua(
local f = braid.fn { name = "f", prompt = "{{x}} {{gen y}}" }
local got = braid.get_all({ first = f{ x = "1" }.y, second = f{ x = "2" }.y })
return got.first .. "," .. got.second
)lua");
  CHECK(Text(r) == "y[1],y[2]");
  CHECK(run.wait_calls == 1);  // wanted together

  FakeRun run2;
  auto e = RunLua(run2, R"lua(
local bad = braid.fn { name = "fail", prompt = "{{x}} {{gen y}}" }
local got = braid.get_all({ ok = "text" })
)lua");
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().rfind("app.lua:3: braid.get_all: item 'ok' is not a braid variable",
                                   0) == 0);

  FakeRun run3;
  auto f = RunLua(run3, R"lua(
local bad = braid.fn { name = "fail", prompt = "{{x}} {{gen y}}" }
local vs = { bad{ x = "1" }.y }
local got = braid.get_all(vs)
return got
)lua");
  REQUIRE_FALSE(f.ok());
  CHECK_MESSAGE(f.status().message().rfind("app.lua:4: ", 0) == 0, f.status().message());
  CHECK(f.status().message().find("boom from the engine") != std::string::npos);
}

TEST_CASE("interrupt stops a program") {
  std::atomic<bool> flag{true};
  DriverOptions o;
  o.interrupt = &flag;
  FakeRun run;
  auto r = RunLua(run, "while true do end", {}, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kCancelled);
}

TEST_CASE("braid.sleep is not Lua time, and other coroutines run while one sleeps") {
  // Each sleep is longer than the whole time limit; the Lua code itself
  // stays far below it. Sleeps in main, in a spawned coroutine and in a
  // coroutine the script made itself (the yield passes through it).
  DriverOptions o;
  o.limits.cpu_seconds = 0.2;
  std::map<std::string, std::string> store;
  FakeRun run(&store);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RunLua(run, R"lua(
local f = braid.fn { name = "f", prompt = "{{x}} {{gen y}}" }
local h = braid.spawn(function() braid.sleep(0.3) return "spawned" end)
local v = f{ x = "a" }.y:get()
braid.sleep(0.3)
coroutine.wrap(function() braid.sleep(0.3) end)()
braid.sleep(0)
return v .. " " .. h:join()
)lua",
                  {}, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_MESSAGE(r.ok(), Text(r));
  CHECK(r->text == "y[a] spawned");
  CHECK(secs >= 0.6);  // main's two sleeps, one after the other
  // The time each sleep ends is recorded for a resume (a zero sleep records nothing).
  CHECK(store.count("main:braid.sleep#0") == 1);
  CHECK(store.count("main:braid.sleep#1") == 1);
  CHECK(store.count("main:braid.sleep#2") == 0);
  CHECK(store.count("main/1:braid.sleep#0") == 1);
}

TEST_CASE("braid.sleep refuses what is not a number of seconds from 0 to 3600") {
  const char* const prefix =
      "app.lua:1: braid.sleep: seconds must be a number from 0 to 3600, got ";
  const std::pair<const char*, std::string> cases[] = {
      {"braid.sleep(-1)", "-1"},         {"braid.sleep(3601)", "3601"},
      {"braid.sleep('soon')", "'soon'"}, {"braid.sleep()", "nil"},
      {"braid.sleep(math.huge)", "inf"}, {"braid.sleep({})", "table: "},
  };
  for (const auto& [code, got] : cases) {
    CAPTURE(code);
    FakeRun run;
    auto r = RunLua(run, code);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().rfind(prefix + got, 0) == 0);
  }
  FakeRun run;
  CHECK(Text(RunLua(run, "braid.sleep('0.01') braid.sleep(3600 - 3600) return 'ok'")) == "ok");
  FakeRun run2;
  auto e = RunLua(run2, "table.sort({ 2, 1 }, function(a, b) braid.sleep(1) return a < b end)");
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().find("braid.sleep: cannot wait here") != std::string::npos);
}

TEST_CASE("an interrupt ends a braid.sleep") {
  std::atomic<bool> flag{false};
  DriverOptions o;
  o.interrupt = &flag;
  FakeRun run;
  std::thread stopper([&flag] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    flag = true;
  });
  auto r = RunLua(run, "braid.sleep(600)\nreturn 'slept'", {}, o);
  stopper.join();
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kCancelled);
}

TEST_CASE("read-before: a call made after a get depends on the value read") {
  FakeRun run;
  auto r = RunLua(run, R"lua(
local f = braid.fn { name = "t", prompt = "T {{x}} {{gen y}}" }
return function()
  local a = f{ x = "1" }.y
  local text = a:get()
  local b = f{ x = text .. "!" }.y        -- built in Lua from the value read
  local h = braid.spawn(function() return f{ x = "c" }.y:get() end)  -- inherits what main read
  local c = h:join()
  local d = f{ x = "d" }.y                -- after joining: what the child read too
  return b:get() .. c .. d:get()
end
)lua");
  REQUIRE_MESSAGE(r.ok(), Text(r));
  REQUIRE(run.reads.size() == 4);
  CHECK(run.reads[0].empty());
  const VarId a = 1;  // the first call's only output
  CHECK(run.reads[1] == std::vector<VarId>{a});
  CHECK(run.reads[2] == std::vector<VarId>{a});  // the spawned coroutine's call
  // main read a; the child read its own call's output (variable 3).
  CHECK(run.reads[3] == std::vector<VarId>{a, 3});
}

TEST_CASE("work left when main returns: waited for, or cancelled with a warning naming it") {
  const char* code = R"lua(
local f = braid.fn { name = "echo", prompt = "Echo {{x}} {{gen y}}" }
return function()
  braid.spawn(function() braid.log("child got " .. f{ x = "a" }.y:get()) end)
  return "main done"
end
)lua";
  for (auto mode : {DriverOptions::OnReturn::kWait, DriverOptions::OnReturn::kCancel}) {
    CAPTURE(static_cast<int>(mode));
    FakeRun run;
    std::vector<std::string> lines;
    DriverOptions o;
    o.on_return = mode;
    o.log = [&](std::string_view l) { lines.emplace_back(l); };
    auto r = RunLua(run, code, {}, o);
    REQUIRE_MESSAGE(r.ok(), Text(r));
    CHECK(r->text == "main done");
    std::string all;
    for (const auto& l : lines) all += l + "\n";
    if (mode == DriverOptions::OnReturn::kWait) {
      CHECK(all == "child got y[a]\n");
    } else {
      CHECK(all.find("child got") == std::string::npos);
      CHECK(all.find("warning: the program returned with work pending; cancelled: coroutine "
                     "main/1 (awaiting echo.y)") != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace braid::lua

namespace braid::lua {
namespace {

TEST_CASE("repl: inputs share one state; expressions print; errors leave it usable") {
  testing::FakeRun run;
  std::unique_ptr<LuaState> state = LuaState::Create({});
  REQUIRE(state);
  Driver driver(run, *state, {});
  auto eval = [&](const std::string& input) { return driver.Evaluate("stdin", input); };
  auto printed = [&](const std::string& input) {
    auto r = eval(input);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    std::string out;
    for (const std::string& v : *r) out += (out.empty() ? "" : "\t") + v;
    return out;
  };
  CHECK(printed("x = 1 + 2").empty());  // a statement prints nothing
  CHECK(printed("x * 2") == "6");       // an expression prints its value
  CHECK(printed("x, 'a', nil") == "3\ta\tnil");
  CHECK(printed(
            R"lua(s = braid.fn { name = "s", prompt = "Say {{w}}: {{gen out max_tokens=4}}" })lua")
            .empty());
  CHECK(printed("v = s{ w = 'hi' }.out").empty());
  CHECK(printed("v:get()") == "out[hi]");
  // A function defined over several inputs' worth of text, then called.
  CHECK(printed("function twice(t)\n  return t .. t\nend").empty());
  CHECK(printed("twice(v:get())") == "out[hi]out[hi]");

  // An unfinished chunk says so; a finished bad one does not.
  auto open = eval("function f()");
  REQUIRE_FALSE(open.ok());
  CHECK(Driver::IsIncomplete(open.status().message()));
  auto bad = eval("x = = 1");
  REQUIRE_FALSE(bad.ok());
  CHECK_FALSE(Driver::IsIncomplete(bad.status().message()));
  CHECK(bad.status().message().find("stdin:1:") != std::string::npos);

  // A runtime error names the place; the state goes on.
  auto err = eval("error('boom')");
  REQUIRE_FALSE(err.ok());
  CHECK(err.status().message().find("stdin:1: boom") != std::string::npos);
  CHECK(printed("x") == "3");

  // A program file: its main function runs with the arguments, and the
  // variables in what it returns are resolved.
  auto program =
      driver.EvaluateProgram("prog.lua",
                             "local s = braid.fn { name = 'p', prompt = '{{a}} {{gen out}}' }\n"
                             "return function(a) return { got = s{ a = a }.out, n = x } end",
                             {"zz"});
  REQUIRE_MESSAGE(program.ok(), program.status().message());
  CHECK(program->at(0).find("\"got\": \"out[zz]\"") != std::string::npos);
  CHECK(program->at(0).find("\"n\": 3") != std::string::npos);

  // A busy loop is stopped by the time limit, and the next input runs.
  LuaLimits tight;
  tight.cpu_seconds = 0.05;
  std::unique_ptr<LuaState> limited = LuaState::Create(tight);
  Driver capped(run, *limited, {});
  auto spin = capped.Evaluate("stdin", "while true do end");
  REQUIRE_FALSE(spin.ok());
  CHECK(spin.status().code() == StatusCode::kResourceExhausted);
  auto after = capped.Evaluate("stdin", "40 + 2");
  REQUIRE_MESSAGE(after.ok(), after.status().message());
  CHECK(after->at(0) == "42");
}

}  // namespace
}  // namespace braid::lua
