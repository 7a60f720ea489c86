// The server's program surfaces through the router (no sockets) on a fake
// engine: DAG and program runs detached and tied to their connection, the
// DAG's validation errors, sessions built call by call, cancellation, the
// event stream, and the resumption of runs a stopped server left behind.
#include "server/runs_service.h"

#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "testing/fakes.h"

namespace braid::server {
namespace {

using nlohmann::json;
using rt::testing::FakeEngine;
using rt::testing::MemoryStore;

// How long a wait for something that must happen may take before the test
// fails: only a bound on a hang, far beyond what a loaded machine needs.
constexpr auto kHang = std::chrono::seconds(60);

struct Fixture {
  explicit Fixture(std::shared_ptr<MemoryStore> s = std::make_shared<MemoryStore>(),
                   const std::function<void(RunsOptions&)>& tweak = {})
      : store(std::move(s)) {
    rt::RuntimeOptions ro;
    ro.engines = {&engine};
    ro.store = store;
    runtime = std::move(rt::Runtime::Open(ro)).value();
    RunsOptions o;
    o.runtime = runtime.get();
    o.max_programs = 2;
    o.max_queued = 4;
    o.lua_limits.cpu_seconds = 600;  // a stuck program stays stuck until stopped
    if (tweak) tweak(o);
    service = std::make_unique<RunsService>(o);
    service->AddRoutes(&router);
  }
  ~Fixture() {
    service->Stop();
    service.reset();
    runtime.reset();
  }
  http::Response Call(const std::string& method, const std::string& path, const json& body = {},
                      std::map<std::string, std::string> query = {},
                      const std::string& client = "tester") {
    http::Request r;
    r.method = method;
    r.path = path;
    r.target = path;
    r.query = std::move(query);
    r.client = client;
    if (!body.is_null()) r.body = body.dump();
    return router.Handle(r);
  }
  // As Call, made by `who`.
  http::Response CallAs(const std::string& who, const std::string& method, const std::string& path,
                        const json& body = {}) {
    return Call(method, path, body, {}, who);
  }
  // Polls the run until it leaves queued/running (or kHang passes).
  json WaitRun(const std::string& id) {
    const auto deadline = std::chrono::steady_clock::now() + kHang;
    while (std::chrono::steady_clock::now() < deadline) {
      json j = json::parse(Call("GET", "/v1/runs/" + id).body);
      if (j["state"] != "queued" && j["state"] != "running") return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return json::parse(Call("GET", "/v1/runs/" + id).body);
  }
  // Polls until the engine has been sent at least n requests (false after
  // kHang).
  bool WaitSubmitted(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + kHang;
    while (engine.submitted().size() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  std::shared_ptr<MemoryStore> store;
  FakeEngine engine;
  std::unique_ptr<rt::Runtime> runtime;
  std::unique_ptr<RunsService> service;
  http::Router router;
};

int StoredAttempts(MemoryStore& store, const std::string& id) {
  auto run = store.GetRun(id);
  return run.ok() ? run->attempts : -1;
}

// Everything queued on a stream until it closes (or is cancelled, or kHang
// passes).
std::string Drain(http::EventStream& s) {
  std::string all;
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<std::string> chunks;
    bool closed = false;
    s.Take(&chunks, &closed);
    for (auto& c : chunks) all += c;
    if (closed) return all;
    if (s.cancelled()) return all + "<cancelled>";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return all + "<not closed>";
}

const json kDag = {{"functions",
                    {{"shout", {{"template", "Shout: {{x}}\n{{gen out max_tokens=8}}"}}},
                     {"both", {{"template", "A={{a}} B={{b}}{{gen out max_tokens=8}}"}}}}},
                   {"calls",
                    {{{"id", "c"},
                      {"function", "both"},
                      {"inputs", {{"a", {{"ref", "a.out"}}}, {"b", {{"ref", "j"}}}}}},
                     {{"id", "a"}, {"function", "shout"}, {"inputs", {{"x", "hello"}}}},
                     {{"id", "b"}, {"function", "shout"}, {"inputs", {{"x", "world"}}}}}},
                   {"joins", {{{"id", "j"}, {"parts", {{{"ref", "b.out"}}, "!"}}, {"sep", ""}}}},
                   {"outputs", {{{"ref", "c.out"}, {"criteria", "latency"}}, "a.out"}},
                   {"detached", true}};

TEST_CASE("a detached DAG runs to the end in dependency order and reports its outputs") {
  Fixture f;
  http::Response r = f.Call("POST", "/v1/dags", kDag);
  REQUIRE(r.status == 202);
  const std::string id = json::parse(r.body)["id"];
  json done = f.WaitRun(id);
  CHECK(done["state"] == "done");
  // FakeEngine answers "<prompt length>"; "Shout: hello\n" is 13 bytes.
  CHECK(done["result"]["a.out"] == "<13>");
  // c's prompt holds a's answer and b's answer joined with "!".
  CHECK(done["result"]["c.out"] ==
        "<" + std::to_string(std::string("A=<13> B=<13>!").size()) + ">");
  CHECK(done["nodes"].size() == 4);
  CHECK(f.engine.submitted().back().request.client == "tester");
  // Listed, with the store's record behind it.
  json list = json::parse(f.Call("GET", "/v1/runs").body);
  CHECK(list["runs"][0]["id"] == id);
  CHECK(list["runs"][0].contains("result"));
  json brief = json::parse(f.Call("GET", "/v1/runs", {}, {{"result", "false"}}).body);
  CHECK(brief["runs"][0]["state"] == "done");
  CHECK_FALSE(brief["runs"][0].contains("result"));
  CHECK(f.Call("GET", "/v1/runs", {}, {{"result", "no"}}).status == 400);
  CHECK(json::parse(f.Call("GET", "/v1/runs/" + id + "/graph", {}, {{"format", "dot"}}).body.empty()
                        ? "null"
                        : "true") == true);
}

TEST_CASE("DAG errors name the place") {
  Fixture f;
  auto error_of = [&](json dag) {
    http::Response r = f.Call("POST", "/v1/dags", dag);
    CHECK(r.status >= 400);
    return json::parse(r.body)["error"]["message"].get<std::string>();
  };
  json cyc = kDag;
  cyc["calls"][1]["inputs"]["x"] = {{"ref", "c.out"}};
  CHECK(error_of(cyc).find("cycle through") != std::string::npos);
  json unknown = kDag;
  unknown["calls"][0]["inputs"]["a"] = {{"ref", "zz.out"}};
  CHECK(error_of(unknown).find("unknown ref 'zz.out'") != std::string::npos);
  json missing = kDag;
  missing["calls"][0]["inputs"].erase("b");
  CHECK(error_of(missing).find("calls[0].inputs: input 'b'") != std::string::npos);
  json badout = kDag;
  badout["outputs"] = {"a.nope"};
  CHECK(error_of(badout).find("has no output 'nope'") != std::string::npos);
  json badtpl = kDag;
  badtpl["functions"]["shout"]["template"] = "{{gen out max_token=3}}";
  CHECK(error_of(badtpl).find("functions.shout") != std::string::npos);
  std::string deep(100, '[');
  http::Response r = f.Call("POST", "/v1/dags");
  http::Request raw;
  raw.method = "POST";
  raw.path = "/v1/dags";
  raw.body = deep + std::string(100, ']');
  http::Response d = f.router.Handle(raw);
  CHECK(d.status == 400);
  CHECK(d.body.find("nested deeper") != std::string::npos);
  json badname = kDag;
  badname["name"] = 5;
  CHECK(error_of(badname).find("name: must be a string") != std::string::npos);
  raw.body = "{\"functions\": ";
  CHECK(f.router.Handle(raw).body.find("invalid JSON at byte") != std::string::npos);
  // A number past a double's range is refused, not thrown (nlohmann throws
  // it even with exceptions off).
  raw.body = "{\"functions\": 1e400}";
  http::Response overflow = f.router.Handle(raw);
  CHECK(overflow.status == 400);
  CHECK(overflow.body.find("invalid JSON") != std::string::npos);
}

TEST_CASE("a program tied to its connection answers on the stream; a disconnect cancels it") {
  Fixture f;
  const std::string src = R"(
local f = braid.fn [[Say {{w}}: {{gen out max_tokens=4}}]]
return function(w) return f{ w = w }.out:get() .. "|" .. w end)";
  http::Response r = f.Call("POST", "/v1/programs", {{"source", src}, {"args", {"hi"}}});
  REQUIRE(r.status == 200);
  REQUIRE(r.stream);
  json answer = json::parse(Drain(*r.stream));
  CHECK(answer["state"] == "done");
  CHECK(answer["result"] == "<8>|hi");  // "Say hi: " is 8 bytes

  // Held replies: the program waits; the client goes away; the run is cancelled.
  f.engine.hold = true;
  http::Response held =
      f.Call("POST", "/v1/programs", {{"source", src}, {"args", {"x"}}, {"stream", true}});
  REQUIRE(held.stream);
  std::string id;
  for (auto& [k, v] : held.headers)
    if (k == "X-Braid-Run-Id") id = v;
  REQUIRE(!id.empty());
  REQUIRE(f.WaitSubmitted(2));  // the held program's request reached the engine
  held.stream->Cancel();
  json st = f.WaitRun(id);
  CHECK(st["state"] == "cancelled");
  f.engine.hold = false;
  f.engine.Release();
}

TEST_CASE("a result of 9 MiB arrives whole: on the stream, the events and the run's status") {
  Fixture f;
  // Past the 8 MiB a stream lets wait for a slow client: the last words of
  // a run are let through whatever their size.
  const size_t size = size_t{9} << 20;
  const json program = {
      {"source", "return function() return string.rep('x', 9 * 1024 * 1024) end"}};
  http::Response r = f.Call("POST", "/v1/programs", program);
  REQUIRE(r.stream);
  const std::string body = Drain(*r.stream);
  json answer = json::parse(body, nullptr, false);
  REQUIRE_MESSAGE(!answer.is_discarded(), body.substr(0, 200));
  CHECK(answer["state"] == "done");
  CHECK(answer["result"].get<std::string>().size() == size);
  json st = json::parse(f.Call("GET", "/v1/runs/" + answer["id"].get<std::string>()).body);
  CHECK(st["result"].get<std::string>().size() == size);

  json streamed = program;
  streamed["stream"] = true;
  r = f.Call("POST", "/v1/programs", streamed);
  REQUIRE(r.stream);
  const std::string sse = Drain(*r.stream);
  CHECK(sse.find("<cancelled>") == std::string::npos);
  CHECK(sse.size() > size);
  CHECK(sse.rfind("data: [DONE]\n\n") == sse.size() - 14);

  // A watcher of a run that ends with a big result gets it too.
  f.engine.hold = true;
  const json held = {{"source", R"(
local f = braid.fn [[Hi {{gen out max_tokens=2}}]]
return function() f{}.out:get(); return string.rep('y', 9 * 1024 * 1024) end)"},
                     {"detached", true}};
  r = f.Call("POST", "/v1/programs", held);
  REQUIRE(r.status == 202);
  const std::string id = json::parse(r.body)["id"];
  http::Response ev = f.Call("GET", "/v1/runs/" + id + "/events");
  REQUIRE(ev.stream);
  f.engine.hold = false;
  f.engine.Release();
  const std::string events = Drain(*ev.stream);
  CHECK(events.find("<cancelled>") == std::string::npos);
  CHECK(events.size() > size);
}

TEST_CASE("DAGs past the size limits are 413 naming the limit, without Retry-After") {
  DagLimits limits;
  limits.max_nodes = 4;  // kDag's own sizes: 4 nodes, 3 refs, 2 functions
  limits.max_edges = 3;
  limits.max_text_bytes = 1000;
  limits.max_functions = 2;
  Fixture f(std::make_shared<MemoryStore>(), [&](RunsOptions& o) { o.dag_limits = limits; });
  auto refused = [&](const json& dag, const std::string& limit) {
    http::Response r = f.Call("POST", "/v1/dags", dag);
    CHECK(r.status == 413);
    CHECK(r.headers.empty());  // no Retry-After: the same DAG fails again
    const std::string message = json::parse(r.body)["error"]["message"];
    CHECK_MESSAGE(message.find(limit) != std::string::npos, message);
  };
  json nodes = kDag;
  nodes["calls"].push_back({{"id", "d"}, {"function", "shout"}, {"inputs", {{"x", "more"}}}});
  refused(nodes, "more than 4 calls and joins");
  json edges = kDag;
  edges["joins"][0]["parts"] = {{{"ref", "b.out"}}, {{"ref", "b.out"}}, {{"ref", "a.out"}}};
  refused(edges, "more than 3 refs");
  json text = kDag;
  text["calls"][1]["inputs"]["x"] = std::string(2000, 't');
  refused(text, "limit of 1000");
  json functions = kDag;
  functions["functions"]["third"] = {{"template", "{{gen out max_tokens=1}}"}};
  refused(functions, "limit of 2");
  // A session's functions and calls have the same limits.
  http::Response s = f.Call("POST", "/v1/sessions", json::object());
  const std::string base = "/v1/sessions/" + json::parse(s.body)["id"].get<std::string>();
  for (int i = 0; i < 3; ++i) {
    http::Response fn =
        f.Call("POST", base + "/functions",
               {{"name", "f" + std::to_string(i)}, {"template", "{{gen a max_tokens=1}}"}});
    CHECK(fn.status == (i < 2 ? 201 : 413));
    if (i == 2) CHECK(fn.headers.empty());
  }
  for (int i = 0; i < 5; ++i) {
    http::Response call = f.Call("POST", base + "/calls", {{"function", "f0"}});
    CHECK(call.status == (i < 4 ? 201 : 413));
    if (i == 4) CHECK(call.headers.empty());
  }
}

TEST_CASE("program errors and the queue limit") {
  Fixture f;
  CHECK(f.Call("POST", "/v1/programs", json::object()).status == 400);
  http::Response bad =
      f.Call("POST", "/v1/programs",
             {{"source", "return function() error('boom') end"}, {"detached", true}});
  REQUIRE(bad.status == 202);
  json st = f.WaitRun(json::parse(bad.body)["id"]);
  CHECK(st["state"] == "failed");
  CHECK(st["error"].get<std::string>().find("boom") != std::string::npos);
  // Two threads, four queued: the seventh waiting program is refused.
  f.engine.hold = true;
  const std::string wait_src = R"(
local f = braid.fn [[Hi {{gen out max_tokens=2}}]]
return function() return f{}.out:get() end)";
  // Six are taken: two run (held by the engine) and four wait. The thread
  // that ran the failed program may not be free again yet, so a refusal
  // before the sixth is retried until it is.
  int accepted = 0, refused = 0;
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  while (accepted < 6 && std::chrono::steady_clock::now() < deadline) {
    http::Response r = f.Call("POST", "/v1/programs", {{"source", wait_src}, {"detached", true}});
    if (r.status == 202) ++accepted;
    if (r.status == 429) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(accepted == 6);
  // With both threads held and four waiting, the next ones are refused.
  for (int i = 0; i < 2; ++i) {
    http::Response r = f.Call("POST", "/v1/programs", {{"source", wait_src}, {"detached", true}});
    if (r.status == 429) {
      ++refused;
      CHECK(r.headers.size() == 1);
    }
  }
  CHECK(refused == 2);
  f.engine.hold = false;
  f.engine.Release();
}

TEST_CASE("a session builds a DAG call by call and reads variables with a goal") {
  Fixture f;
  http::Response s = f.Call("POST", "/v1/sessions", json::object());
  REQUIRE(s.status == 201);
  const std::string sid = json::parse(s.body)["id"];
  const std::string base = "/v1/sessions/" + sid;
  http::Response fn = f.Call("POST", base + "/functions",
                             {{"name", "echo"}, {"template", "Echo {{q}}{{gen a max_tokens=4}}"}});
  REQUIRE(fn.status == 201);
  CHECK(json::parse(fn.body)["inputs"] == json{"q"});
  // A variable the client sets later feeds the first call.
  const auto q = json::parse(f.Call("POST", base + "/vars", {{"name", "question"}}).body)["var"];
  const auto a = json::parse(
      f.Call("POST", base + "/calls", {{"function", "echo"}, {"inputs", {{"q", {{"var", q}}}}}})
          .body)["outputs"]["a"];
  const auto b = json::parse(
      f.Call("POST", base + "/calls",
             {{"template", "Then {{x}}{{gen b max_tokens=4}}"}, {"inputs", {{"x", {{"var", a}}}}}})
          .body)["outputs"]["b"];
  // Not set yet: the read times out pending.
  http::Response early = f.Call("GET", base + "/vars/" + std::to_string(b.get<int>()), {},
                                {{"timeout_ms", "50"}, {"criteria", "latency"}});
  CHECK(early.status == 202);
  CHECK(json::parse(early.body)["state"] == "pending");
  CHECK(f.Call("PUT", base + "/vars/" + std::to_string(q.get<int>()), {{"value", "why?"}}).status ==
        200);
  http::Response got =
      f.Call("GET", base + "/vars/" + std::to_string(b.get<int>()), {}, {{"timeout_ms", "60000"}});
  CHECK(got.status == 200);
  CHECK(json::parse(got.body)["value"] ==
        "<" + std::to_string(std::string("Then <9>").size()) + ">");
  // Errors: unknown variable, bad input, unknown function.
  CHECK(f.Call("GET", base + "/vars/999").status == 404);
  CHECK(f.Call("POST", base + "/calls", {{"function", "nope"}}).status == 400);
  CHECK(f.Call("POST", base + "/calls", {{"function", "echo"}, {"inputs", {{"q", 5}}}}).status ==
        400);
  CHECK(f.Call("DELETE", base).status == 200);
  CHECK(f.Call("POST", base + "/calls", {{"function", "echo"}}).status == 409);
}

TEST_CASE("a session evaluates Lua inputs one at a time; an interrupt stops a waiting one") {
  Fixture f;
  const std::string sid = json::parse(f.Call("POST", "/v1/sessions", json::object()).body)["id"];
  const std::string eval = "/v1/sessions/" + sid + "/eval";
  auto run = [&](const std::string& source) {
    http::Response r = f.Call("POST", eval, {{"source", source}});
    REQUIRE(r.status == 200);
    REQUIRE(r.stream);
    return json::parse(Drain(*r.stream));
  };
  CHECK(run("1 + 2")["values"] == json{"3"});
  CHECK(run("x = 5")["values"] == json::array());
  CHECK(run("x * 2")["values"] == json{"10"});  // globals stay
  CHECK(run("function g(")["code"] == "incomplete");
  const json boom = run("error('boom')");
  CHECK(boom["code"] == "error");
  CHECK(boom["error"].get<std::string>().rfind("input4:1: boom", 0) == 0);
  CHECK(run("f = braid.fn [[Say {{w}}: {{gen out max_tokens=4}}]]")["values"] == json::array());
  CHECK(run("tostring(f)")["values"] == json{"braid.fn(fn@input5:1)"});  // named by its input
  CHECK(run("f{ w = 'hi' }.out:get()")["values"] == json{"<8>"});
  CHECK(f.Call("POST", eval, json::object()).status == 400);  // no source

  // A get the engine holds: the session is busy until it is interrupted.
  f.engine.hold = true;
  http::Response held =
      f.Call("POST", eval, {{"source", "f{ w = 'x' }.out:get()"}, {"stream", true}});
  REQUIRE(held.stream);
  REQUIRE(f.WaitSubmitted(2));  // the held input's request reached the engine
  CHECK(f.Call("POST", eval, {{"source", "1"}}).status == 409);
  CHECK(f.Call("POST", "/v1/sessions/" + sid + "/calls", {{"template", "Hi {{gen o}}"}}).status ==
        409);
  http::Response stop = f.Call("POST", "/v1/sessions/" + sid + "/interrupt");
  CHECK(json::parse(stop.body)["interrupted"] == true);
  const std::string events = Drain(*held.stream);
  CHECK(events.find("\"code\":\"interrupted\"") != std::string::npos);
  CHECK(events.find("data: [DONE]") != std::string::npos);
  f.engine.hold = false;
  f.engine.Release();
  CHECK(run("40 + 2")["values"] == json{"42"});  // the session goes on
}

TEST_CASE("events stream node changes, token deltas and the end") {
  Fixture f;
  f.engine.hold = true;
  json dag = kDag;
  http::Response r = f.Call("POST", "/v1/dags", dag);
  const std::string id = json::parse(r.body)["id"];
  http::Response ev = f.Call("GET", "/v1/runs/" + id + "/events");
  REQUIRE(ev.stream);
  for (int i = 0; i < 50; ++i) {
    f.engine.Release();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  f.engine.hold = false;
  f.engine.Release();
  const std::string all = Drain(*ev.stream);
  CHECK(all.find("\"type\":\"node\"") != std::string::npos);
  CHECK(all.find("\"type\":\"tokens\"") != std::string::npos);
  CHECK(all.find("\"state\":\"done\"") != std::string::npos);
  CHECK(all.find("<not closed>") == std::string::npos);
}

TEST_CASE("runs a stopped server left behind are resumed, finished calls replayed") {
  auto store = std::make_shared<MemoryStore>();
  std::string id;
  size_t first_calls = 0;
  {
    Fixture f(store);
    f.engine.hold = true;
    http::Response r = f.Call("POST", "/v1/dags", kDag);
    id = json::parse(r.body)["id"];
    // A call reaches the engine (which holds its answer); then the server stops.
    REQUIRE(f.WaitSubmitted(1));
    first_calls = f.engine.submitted().size();
  }
  Fixture g(store);
  auto n = g.service->ResumeInterrupted();
  REQUIRE(n.ok());
  CHECK(*n == 1);
  json done = g.WaitRun(id);
  CHECK(done["state"] == "done");
  CHECK(done["result"]["a.out"] == "<13>");
  CHECK(first_calls >= 1);
}

TEST_CASE("a named DAG resumes under its name; a finished run's result outlives the server") {
  auto store = std::make_shared<MemoryStore>();
  json named = kDag;
  named["name"] = "nightly";
  std::string finished, interrupted;
  {
    Fixture f(store);
    finished = json::parse(f.Call("POST", "/v1/dags", named).body)["id"];
    REQUIRE(f.WaitRun(finished)["state"] == "done");
    f.engine.hold = true;
    interrupted = json::parse(f.Call("POST", "/v1/dags", named).body)["id"];
    REQUIRE(f.WaitSubmitted(4));
  }
  Fixture g(store);
  auto n = g.service->ResumeInterrupted();
  REQUIRE(n.ok());
  CHECK(*n == 1);
  json resumed = g.WaitRun(interrupted);
  CHECK(resumed["state"] == "done");
  CHECK(resumed["result"]["a.out"] == "<13>");
  // Known to the new server through the store only, result and all.
  json old = json::parse(g.Call("GET", "/v1/runs/" + finished).body);
  CHECK(old["program"] == "http:dag:nightly");
  CHECK(old["state"] == "done");
  CHECK(old["result"]["a.out"] == "<13>");
  CHECK(old["result"]["c.out"].is_string());
  // A name that is not a string is refused, not thrown.
  http::Response r = g.Call("POST", "/v1/sessions", {{"name", 1}});
  CHECK(r.status == 400);
  CHECK(r.body.find("name: must be a string") != std::string::npos);
}

TEST_CASE("memory budget: 413 for what can never fit, 429 while full, named; ends give back") {
  Fixture f(std::make_shared<MemoryStore>(), [](RunsOptions& o) {
    o.memory_bytes = size_t{4} << 20;
    o.client_memory_bytes = size_t{3} << 20;
  });
  // A program is charged 1 MB and twice its source: 3.2 MB is over the cap.
  const std::string big = "-- " + std::string(1100 << 10, 'x') + "\nreturn 1";
  http::Response r = f.Call("POST", "/v1/programs", {{"source", big}, {"detached", true}});
  CHECK(r.status == 413);
  CHECK(r.body.find("memory budget") != std::string::npos);
  CHECK(r.body.find("--client-memory-mb") != std::string::npos);
  // A DAG is charged 16 KB a node besides its body: 200 calls are 3.2 MB.
  json dag = {{"functions", {{"f", {{"template", "{{x}}{{gen out max_tokens=1}}"}}}}},
              {"calls", json::array()},
              {"outputs", {"c0.out"}},
              {"detached", true}};
  for (int i = 0; i < 200; ++i)
    dag["calls"].push_back(
        {{"id", "c" + std::to_string(i)}, {"function", "f"}, {"inputs", {{"x", "hi"}}}});
  r = f.Call("POST", "/v1/dags", dag);
  CHECK(r.status == 413);
  CHECK(r.body.find("memory budget") != std::string::npos);
  // Sessions hold 1 MB each while they live: the fourth is over the client's
  // cap (429, retry later); another client then has only the server's last
  // megabyte.
  std::vector<std::string> sessions;
  for (int i = 0; i < 3; ++i) {
    r = f.Call("POST", "/v1/sessions", json::object());
    REQUIRE(r.status == 201);
    sessions.push_back(json::parse(r.body)["id"]);
  }
  r = f.Call("POST", "/v1/sessions", json::object());
  CHECK(r.status == 429);
  CHECK(r.body.find("client 'tester' holds 3 MB") != std::string::npos);
  r = f.CallAs("other", "POST", "/v1/sessions", json::object());
  CHECK_MESSAGE(r.status == 201, r.body);
  r = f.CallAs("other", "POST", "/v1/sessions", json::object());
  CHECK(r.status == 429);
  CHECK(r.body.find("--memory-mb") != std::string::npos);
  // An ended session gives its megabyte back.
  CHECK(f.Call("DELETE", "/v1/sessions/" + sessions[0]).status == 200);
  CHECK(f.Call("POST", "/v1/sessions", json::object()).status == 201);
}

TEST_CASE("memory budget: a program that grows past it fails naming the cap") {
  Fixture f(std::make_shared<MemoryStore>(), [](RunsOptions& o) {
    o.memory_bytes = size_t{64} << 20;
    o.client_memory_bytes = size_t{16} << 20;
  });
  http::Response r = f.Call(
      "POST", "/v1/programs",
      {{"source", "local t = {} for i = 1, 64 do t[i] = string.rep(tostring(i), 1 << 20) end"},
       {"detached", true}});
  REQUIRE(r.status == 202);
  json run = f.WaitRun(json::parse(r.body)["id"]);
  CHECK(run["state"] == "failed");
  CHECK(run["error"].get<std::string>().find("memory budget: client 'tester' holds") !=
        std::string::npos);
  // Its memory went back: the same client runs again.
  r = f.Call("POST", "/v1/programs", {{"source", "return 'fine'"}, {"detached", true}});
  REQUIRE(r.status == 202);
  CHECK(f.WaitRun(json::parse(r.body)["id"])["result"] == "fine");
}

TEST_CASE("a large result stays in the store: lists give its size, the run gives it whole") {
  Fixture f(std::make_shared<MemoryStore>(),
            [](RunsOptions& o) { o.max_result_kept_bytes = 1000; });
  http::Response r = f.Call("POST", "/v1/programs",
                            {{"source", "return string.rep('y', 5000)"}, {"detached", true}});
  REQUIRE(r.status == 202);
  const std::string id = json::parse(r.body)["id"];
  json run = f.WaitRun(id);
  CHECK(run["state"] == "done");
  CHECK(run["result"] == std::string(5000, 'y'));
  json list = json::parse(f.Call("GET", "/v1/runs").body)["runs"];
  REQUIRE(list.size() >= 1);
  CHECK(list[0]["id"] == id);
  CHECK(!list[0].contains("result"));
  CHECK(list[0]["result_bytes"] == 5002);  // the JSON string, quotes included
}

TEST_CASE("a run interrupted max_attempts times is failed instead of resumed") {
  auto store = std::make_shared<MemoryStore>();
  std::string id;
  {
    Fixture f(store);
    f.engine.hold = true;  // the DAG never ends: each server stops under it
    id = json::parse(f.Call("POST", "/v1/dags", kDag).body)["id"];
    REQUIRE(f.WaitSubmitted(1));
  }
  CHECK(store->GetRun(id)->attempts == 1);
  for (int resume = 1; resume <= 2; ++resume) {
    Fixture g(store);
    g.engine.hold = true;
    auto n = g.service->ResumeInterrupted();
    REQUIRE(n.ok());
    CHECK(*n == 1);
    REQUIRE(g.WaitSubmitted(1));
    CHECK(store->GetRun(id)->attempts == resume + 1);
  }
  // Started 3 times (RunsOptions::max_attempts), no call finished.
  Fixture h(store);
  auto n = h.service->ResumeInterrupted();
  REQUIRE(n.ok());
  CHECK(*n == 0);
  json failed = json::parse(h.Call("GET", "/v1/runs/" + id).body);
  CHECK(failed["state"] == "failed");
  CHECK(failed["error"] == "interrupted 3 times without progress; not resumed again");
  CHECK(store->GetRun(id)->status == "failed");
  CHECK(h.engine.submitted().empty());
}

TEST_CASE("one client's stuck programs leave a thread to another; cancel stops them") {
  Fixture f(std::make_shared<MemoryStore>(),  // 2 threads, 1 per client
            [](RunsOptions& o) { o.max_programs_per_client = 1; });
  const json stuck = {{"source", "while true do end"}, {"detached", true}};
  std::vector<std::string> alice;
  for (int i = 0; i < 3; ++i) {
    http::Response r = f.Call("POST", "/v1/programs", stuck, {}, "alice");
    REQUIRE(r.status == 202);
    alice.push_back(json::parse(r.body)["id"]);
  }
  http::Response r =
      f.Call("POST", "/v1/programs",
             {{"source", "return function() return 'hi' end"}, {"detached", true}}, {}, "bob");
  REQUIRE(r.status == 202);
  const std::string bob = json::parse(r.body)["id"];
  json done = f.WaitRun(bob);
  CHECK(done["state"] == "done");
  CHECK(done["result"] == "hi");
  CHECK(json::parse(f.Call("GET", "/v1/runs/" + alice[0]).body)["state"] == "running");
  for (const std::string& id : alice) {
    CHECK(f.Call("POST", "/v1/runs/" + id + "/cancel", {}, {}, "alice").status == 200);
    CHECK(f.WaitRun(id)["state"] == "cancelled");
  }
}

TEST_CASE("draining refuses new work and starts no queued run; what runs finishes") {
  Fixture f;  // 2 threads, 4 queued
  f.engine.hold = true;
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    http::Response r = f.Call("POST", "/v1/dags", kDag);
    REQUIRE(r.status == 202);
    ids.push_back(json::parse(r.body)["id"]);
  }
  REQUIRE(f.WaitSubmitted(2));  // two DAGs hold the threads; the third waits
  f.service->BeginDrain();
  CHECK(f.Call("POST", "/v1/dags", kDag).status == 503);
  CHECK(f.Call("POST", "/v1/programs", {{"source", "return 1"}}).status == 503);
  CHECK(f.Call("POST", "/v1/sessions", json::object()).status == 503);
  CHECK(f.Call("GET", "/v1/runs/" + ids[0]).status == 200);  // reads go on
  CHECK(f.service->Running() == 2);
  f.engine.hold = false;
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  while (f.service->Running() > 0 && std::chrono::steady_clock::now() < deadline) {
    f.engine.Release();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(f.service->Running() == 0);
  CHECK(f.WaitRun(ids[0])["state"] == "done");
  CHECK(f.WaitRun(ids[1])["state"] == "done");
  // The third never started here: it stays for the next server.
  CHECK(json::parse(f.Call("GET", "/v1/runs/" + ids[2]).body)["state"] == "queued");
  CHECK(StoredAttempts(*f.store, ids[2]) == 0);
}

TEST_CASE("a program on the server reads no file, even one its args name") {
  Fixture f;
  const std::string path = BRAID_SOURCE_DIR "/README.md";  // exists on this machine
  http::Response r = f.Call(
      "POST", "/v1/programs",
      {{"source", "return braid.read(braid.args[1])"}, {"args", {path}}, {"detached", true}});
  REQUIRE(r.status == 202);
  json run = f.WaitRun(json::parse(r.body)["id"]);
  CHECK(run["state"] == "failed");
  CHECK(run["error"].get<std::string>().find(
            "braid.read: a program run by a server has no file access ('" + path +
            "' was not read): pass the text itself as one of the program's args") !=
        std::string::npos);
}

}  // namespace
}  // namespace braid::server
