// The sandbox as a hostile script meets it, class by class (the classes of
// the known Redis Lua CVEs and their siblings): C++ trusting values on a Lua
// stack it does not own, shared metatables and finalizers, limits that a
// script tries to outrun, files outside the app, host memory outside the cap,
// bytecode and huge strings through C functions. Every case must end with a
// clear error (or its documented result) within a bounded time, never a
// crash; the sanitizer build runs these too.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "lua/driver.h"
#include "lua/fake_run.h"

namespace braid::lua {
namespace {

using testing::FakeRun;

struct Timed {
  Result<ProgramResult> result;
  double seconds = 0;
};

Timed RunTimed(const std::string& code, DriverOptions options = {},
               std::vector<std::string> args = {}) {
  FakeRun run;
  auto t0 = std::chrono::steady_clock::now();
  auto r = RunProgram(run, "app.lua", code, args, options);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {std::move(r), s};
}

std::string Text(const Result<ProgramResult>& r) {
  if (!r.ok()) return "ERROR: " + r.status().message();
  return r->text;
}

void ExpectFailure(const std::string& code, const std::string& needle, DriverOptions options = {}) {
  Timed t = RunTimed(code, options);
  CAPTURE(code);
  CAPTURE(Text(t.result));
  CHECK_FALSE(t.result.ok());
  CHECK(Text(t.result).find(needle) != std::string::npos);
  CHECK(t.seconds < 60.0);  // it ended: a bound on a hang, not on speed
}

DriverOptions TimeLimit(double seconds) {
  DriverOptions o;
  o.limits.cpu_seconds = seconds;
  return o;
}

// ---- C++ trusting the Lua stack -------------------------------------------------

TEST_CASE("a finished coroutine cannot be resumed again to change what join returns") {
  Timed t = RunTimed(R"lua(
local co
local h = braid.spawn(function() co = coroutine.running(); return 1, 2, 3 end)
local a = { h:join() }
local ok, err = pcall(coroutine.resume, co)
local ok2, err2 = pcall(coroutine.resume, co, print)
local b = { h:join() }
return table.concat(a, ",") .. "|" .. table.concat(b, ",") .. "|" .. tostring(ok) .. "|" ..
       coroutine.status(co) .. "|" .. err
)lua");
  REQUIRE_MESSAGE(t.result.ok(), Text(t.result));
  CHECK(t.result->text.rfind("1,2,3|1,2,3|false|dead|", 0) == 0);
  CHECK(t.result->text.find("coroutine.resume: this coroutine is run by braid") !=
        std::string::npos);
}

TEST_CASE("braid's coroutines cannot be driven by the script") {
  // A spawned coroutine resuming main (which waits in join).
  ExpectFailure(R"lua(
local main = coroutine.running()
local h = braid.spawn(function() return coroutine.resume(main) end)
return h:join()
)lua",
                "coroutine.resume: this coroutine is run by braid");
  // Closing one, or wrapping it.
  ExpectFailure(R"lua(
local h = braid.spawn(function() coroutine.yield() return 1 end)
local co
braid.spawn(function() co = coroutine.running() coroutine.yield() end)
coroutine.yield()
return coroutine.close(co)
)lua",
                "coroutine.close: this coroutine is run by braid");
  // A program failure is an error result (a non-zero exit), never a result string.
  Timed t = RunTimed(
      "local main = coroutine.running()\nbraid.spawn(function() coroutine.resume(main) end)\n"
      "return 'main done'");
  CHECK_FALSE(t.result.ok());
}

TEST_CASE("many return values and huge ranges are clean errors") {
  ExpectFailure("return table.unpack({}, 1, 1e8)", "too many results");
  ExpectFailure("local s = string.rep('x', 1e6) return select('#', s:byte(1, -1))",
                "string slice too long");
  Timed t = RunTimed(R"lua(
local h = braid.spawn(function() return table.unpack({}, 1, 7000) end)
return tostring(select('#', h:join()))
)lua");
  CHECK(Text(t.result) == "7000");
}

// ---- metatables and finalizers ----------------------------------------------------

TEST_CASE("host metatables are locked; the string metatable too") {
  Timed t = RunTimed(R"lua(
local f = braid.fn "Say {{gen x max_tokens=1}}"
local v = f{}.x
local h = braid.spawn(function() end)
return table.concat({ tostring(getmetatable(v)), tostring(getmetatable(f)),
                      tostring(getmetatable(h)), tostring(getmetatable("")) }, ",")
)lua");
  CHECK(Text(t.result) == "locked,locked,locked,locked");
  ExpectFailure("local f = braid.fn 'Say {{gen x}}'\ngetmetatable(f{}.x).__gc = function() end",
                "attempt to index a string value");
  ExpectFailure("getmetatable('').__index = {}", "attempt to index a string value");
  ExpectFailure(
      "setmetatable({}, setmetatable({}, { __index = { __gc = print } }))\n"
      "return setmetatable({}, { __gc = print })",
      "__gc metamethods are not allowed");
}

TEST_CASE("closing the state runs no script code, whatever the script left behind") {
  // Pending to-be-closed variables in suspended coroutines, a wrapped
  // coroutine mid-way, a weak table: the run ends and the state closes.
  Timed t = RunTimed(R"lua(
local log = {}
local co = coroutine.create(function()
  local x <close> = setmetatable({}, { __close = function() while true do end end })
  coroutine.yield()
end)
coroutine.resume(co)
local w = coroutine.wrap(function()
  local y <close> = setmetatable({}, { __close = function() while true do end end })
  coroutine.yield()
end)
w()
setmetatable(log, { __mode = "k" })
return "ended"
)lua");
  CHECK(Text(t.result) == "ended");
  CHECK(t.seconds < 60.0);  // a bound on a hang, not on speed
}

// ---- limits a script tries to outrun ------------------------------------------------

TEST_CASE("limits end the program inside message handlers, callbacks and nested pcalls") {
  const char* programs[] = {
      "xpcall(error, function() while true do end end)\nreturn 'escaped'",
      "while true do xpcall(function() while true do end end, function() while true do end end) "
      "end",
      "local function f(n) if n == 0 then while true do end end pcall(f, n - 1) pcall(f, n - 1) "
      "end\nf(40)",
      "local function h() return xpcall(h, h) end\nxpcall(function() while true do end end, h)",
      "table.sort({3, 2, 1}, function(a, b) while true do end end)",
      "table.sort({3, 2, 1}, function(a, b) pcall(function() while true do end end) while true do "
      "end end)",
      "local s = string.gsub('aaaa', 'a', function() xpcall(error, function() while true do end "
      "end) end)",
      "local co = coroutine.wrap(function() xpcall(error, function() while true do end end) "
      "end)\nco()\n"
      "while true do end",
      "local t = setmetatable({}, { __index = function() while true do end end })\nreturn t.x",
      "local x <close> = setmetatable({}, { __close = function() while true do end end })\nwhile "
      "true do end",
  };
  for (const char* code : programs) {
    ExpectFailure(code, "time limit", TimeLimit(0.2));
  }
  DriverOptions o;
  o.limits.cpu_seconds = 0;
  o.limits.max_instructions = 2000000;
  ExpectFailure("xpcall(error, function() while true do end end)", "instruction limit", o);
}

TEST_CASE("an interrupt stops a loop inside a message handler") {
  std::atomic<bool> flag{true};
  DriverOptions o;
  o.interrupt = &flag;
  Timed t = RunTimed("xpcall(error, function() while true do end end)\nreturn 'escaped'", o);
  REQUIRE_FALSE(t.result.ok());
  CHECK(t.result.status().code() == StatusCode::kCancelled);
}

TEST_CASE("a deep chain of coroutine.close is a clean error") {
  ExpectFailure(R"lua(
local coro = false
for i = 1, 20000 do
  local previous = coro
  coro = coroutine.create(function()
    local cc <close> = setmetatable({}, { __close = function()
      if previous then assert(coroutine.close(previous)) end
    end })
    coroutine.yield()
  end)
  coroutine.resume(coro)
end
local ok, err = coroutine.close(coro)
error(err)
)lua",
                "closes nested more than 64 deep");
  // A short chain works.
  Timed t = RunTimed(R"lua(
local closed = 0
local coro = false
for i = 1, 10 do
  local previous = coro
  coro = coroutine.create(function()
    local cc <close> = setmetatable({}, { __close = function()
      closed = closed + 1
      if previous then assert(coroutine.close(previous)) end
    end })
    coroutine.yield()
  end)
  coroutine.resume(coro)
end
assert(coroutine.close(coro))
return tostring(closed)
)lua");
  CHECK(Text(t.result) == "10");
}

// ---- files -------------------------------------------------------------------------------

struct AppDir {
  std::filesystem::path dir;
  AppDir() {
    char tmpl[] = "/tmp/braid-sandbox-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~AppDir() { std::filesystem::remove_all(dir); }
  void Write(const std::string& name, const std::string& text) const {
    std::filesystem::create_directories((dir / name).parent_path());
    std::ofstream(dir / name) << text;
  }
};

Timed ReadIn(const AppDir& app, const std::string& path, std::vector<std::string> args = {}) {
  DriverOptions o;
  o.script_dir = app.dir.string();
  o.max_read_bytes = 1 << 20;
  return RunTimed("return braid.read(...)", o,
                  args.empty() ? std::vector<std::string>{path} : args);
}

TEST_CASE("braid.read reads regular files beside the script and nothing else") {
  AppDir app;
  app.Write("input.txt", "hello");
  app.Write("data/nested.txt", "nested");
  app.Write("big.txt", std::string((1 << 20) + 1, 'x'));
  std::filesystem::create_symlink("/etc/passwd", app.dir / "passwd");
  std::filesystem::create_symlink("/proc/self/environ", app.dir / "environ");
  std::filesystem::create_symlink(app.dir / "input.txt", app.dir / "inner_link");
  std::filesystem::create_directory_symlink("/etc", app.dir / "etc");
  REQUIRE(mkfifo((app.dir / "fifo").c_str(), 0600) == 0);
  std::filesystem::create_directory(app.dir / "dir");

  // The reads below name paths that are not program arguments: "x" is.
  auto read = [&](const std::string& p) {
    DriverOptions o;
    o.script_dir = app.dir.string();
    o.max_read_bytes = 1 << 20;
    return RunTimed("return braid.read('" + p + "')", o, {"x"});
  };
  CHECK(Text(read("input.txt").result) == "hello");
  CHECK(Text(read("./data/nested.txt").result) == "nested");
  for (const char* p : {"passwd", "environ", "inner_link", "etc/passwd"}) {
    Timed t = read(p);
    CAPTURE(p);
    CHECK(Text(t.result).find("symbolic link") != std::string::npos);
  }
  Timed fifo = read("fifo");
  CHECK(Text(fifo.result).find("'fifo' is not a regular file") != std::string::npos);
  CHECK(fifo.seconds < 60.0);  // not left waiting for a writer (a hang bound, not speed)
  CHECK(Text(read("dir").result).find("not a regular file") != std::string::npos);
  CHECK(Text(read("big.txt").result).find("larger than 1 MB") != std::string::npos);
  CHECK(Text(read("../input.txt").result).find("neither a program argument") != std::string::npos);
  CHECK(Text(read("/etc/passwd").result).find("neither a program argument") != std::string::npos);
  CHECK(Text(read("missing.txt").result).find("cannot open 'missing.txt'") != std::string::npos);
  // A file the user named on the command line: read even outside the
  // directory, but still only a regular file, size checked.
  CHECK(Text(ReadIn(app, (app.dir / "input.txt").string()).result) == "hello");
  Timed named_fifo = ReadIn(app, (app.dir / "fifo").string());
  CHECK(Text(named_fifo.result).find("is not a regular file") != std::string::npos);
  CHECK(Text(ReadIn(app, "/dev/zero").result).find("is not a regular file") != std::string::npos);
}

// ---- host memory --------------------------------------------------------------------------

DriverOptions MemoryCap(size_t mb) {
  DriverOptions o;
  o.limits.memory_bytes = mb << 20;
  return o;
}

// A table holding 2,000 references to one 10 MB string: 10 MB to Lua, 20 GB
// once copied by the host.
const char* const kTwoThousandCopies = R"lua(
local s = string.rep("x", 1e7)
local t = {}
for i = 1, 2000 do t[i] = s end
)lua";

TEST_CASE("host copies of script data count against the memory cap") {
  // Call inputs kept by the runtime.
  ExpectFailure(R"lua(
local f = braid.fn "{{x}} {{gen y max_tokens=1}}"
local s = string.rep("x", 1e7)
for i = 1, 2000 do f{ x = s } end
return "ok"
)lua",
                "memory limit", MemoryCap(64));
  // Join parts.
  ExpectFailure(kTwoThousandCopies + std::string("return braid.join(t, '')"), "memory limit",
                MemoryCap(64));
  // The program's result written out as JSON.
  ExpectFailure(kTwoThousandCopies + std::string("return t"), "larger than the memory limit",
                MemoryCap(64));
  // Within the cap all of it works.
  Timed t = RunTimed(R"lua(
local f = braid.fn "{{x}} {{gen y max_tokens=1}}"
local s = string.rep("x", 1e5)
local vs = {}
for i = 1, 10 do vs[i] = f{ x = s }.y end
return tostring(#braid.join(vs, ""):get())
)lua",
                     MemoryCap(64));
  CHECK(Text(t.result) == std::to_string(10 * (100000 + 3)));
}

// ---- bytecode and huge strings through C functions ------------------------------------------

TEST_CASE("no bytecode, and huge strings through C functions stop at the memory cap") {
  ExpectFailure("return load(string.char(27) .. 'Lua', 'x')()", "attempt to call a nil value");
  ExpectFailure("return load('return 1', 'x', 'b')", "only text chunks");
  ExpectFailure("return string.dump(print)", "attempt to call a nil value");
  for (const char* code :
       {"return #string.rep('x', 1 << 28)", "return #string.rep('ab', 1 << 28, ',')",
        "local t = {} for i = 1, 64 do t[i] = string.rep('y', 1 << 20) end "
        "return #table.concat(t, '', 1, 64):rep(64)",
        "return #string.format('%s%s', string.rep('x', 1 << 25), string.rep('x', 1 << 25))",
        "local s = 'x' while true do s = s .. s end"}) {
    ExpectFailure(code, "memory limit", MemoryCap(32));
  }
  ExpectFailure("return string.pack('i17', 1)", "out of limits");
  ExpectFailure("return string.rep('x', -1, string.rep('y', 1 << 30))", "memory limit",
                MemoryCap(32));
}

// A C call runs no count hook; the pattern functions check the limits
// themselves (lua_string_lib.cpp), so backtracking cannot hold the thread.
TEST_CASE("a catastrophic pattern match is stopped by the time limit and by an interrupt") {
  const std::string setup =
      "local s, p = string.rep('a', 30) .. 'b', string.rep('a*', 30) .. 'c'\n";
  for (const char* code :
       {"return string.find(s, p)", "local ok = pcall(string.gsub, s, p, '') return 'escaped'",
        "return braid.join({'x'}, ''):get():gsub('.', function() return pcall(s.match, s, p) "
        "and 'escaped' end)"}) {
    ExpectFailure(setup + code, "time limit", TimeLimit(0.5));
  }
  std::atomic<bool> flag{false};
  std::thread stopper([&flag] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    flag.store(true);
  });
  DriverOptions o = TimeLimit(0);
  o.interrupt = &flag;
  Timed t = RunTimed(setup + "local ok = pcall(string.find, s, p) return 'escaped'", o);
  stopper.join();
  REQUIRE_FALSE(t.result.ok());
  CHECK(t.result.status().code() == StatusCode::kCancelled);
  CHECK(t.seconds < 60.0);  // a bound on a hang, not on speed
}

}  // namespace
}  // namespace braid::lua
