// Clients kept apart on a server with API keys: the key file's roles, the
// admin flag the session sets, every run and session route answering 404 for
// another client's ids, lists of the caller's runs only, admins seeing
// everything (runs of braid run in the same store included), resumed runs
// keeping their owner, and /v1/stats and /metrics without other clients'
// names. Through the router on a fake engine (no sockets).
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "http/metrics.h"
#include "http/request_parse.h"
#include "http/server.h"
#include "http/stats_history.h"
#include "server/runs_service.h"
#include "testing/fakes.h"

namespace braid::server {
namespace {

using nlohmann::json;
using rt::testing::FakeEngine;
using rt::testing::MemoryStore;

// A bound on a hang only, far beyond what a loaded machine needs.
constexpr auto kHang = std::chrono::seconds(60);

std::string WriteKeys(const std::string& text) {
  static int n = 0;
  std::string path =
      "/tmp/braid_tenancy_keys_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("the key file gives roles; files without them stay valid") {
  std::string path = WriteKeys(
      "alice sk-alice-0123\n"
      "bob sk-bob-456789 weight=2 role=user\n"
      "root sk-root-00001 role=admin\n"
      "root sk-root-00002 role=admin weight=3\n"
      "sk-anon-999999\n");
  auto keys = http::ReadApiKeys(path);
  std::remove(path.c_str());
  REQUIRE_MESSAGE(keys.ok(), keys.status().ToString());
  CHECK(keys->keys.size() == 5);
  CHECK(keys->admins == std::set<std::string>{"root"});
  CHECK(keys->weights == std::map<std::string, double>{{"bob", 2.0}, {"root", 3.0}});
  CHECK(keys->keys.at("sk-anon-999999") == "key5");

  auto error = [](const std::string& text) {
    std::string p = WriteKeys(text);
    auto r = http::ReadApiKeys(p);
    std::remove(p.c_str());
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(error("a sk-aaaaaaaa role=root\n").find(":1: role must be admin or user") !=
        std::string::npos);
  // One role per client: a second key cannot see more than the first.
  CHECK(error("a sk-aaaaaaaa\na sk-bbbbbbbb role=admin\n").find(":2: client \"a\"") !=
        std::string::npos);
  CHECK(error("a sk-aaaaaaaa role=admin role=admin\n").find(":1: expected") != std::string::npos);
  // A bare key has no options: "KEY role=admin" reads as NAME KEY, and the
  // "key" role=admin is one an old file could hold.
  auto bare = WriteKeys("sk-aaaaaaaa role=admin\n");
  keys = http::ReadApiKeys(bare);
  std::remove(bare.c_str());
  REQUIRE(keys.ok());
  CHECK(keys->admins.empty());
  CHECK(keys->keys.at("role=admin") == "sk-aaaaaaaa");
}

TEST_CASE("Admit names the client and marks admin keys") {
  http::ServerOptions o;
  o.api_keys = {{"sk-alice-0001", "alice"}, {"sk-root-00001", "root"}};
  o.admin_clients = {"root"};
  auto admit = [&](const std::string& key) {
    http::Request r;
    r.method = "GET";
    r.path = "/v1/runs";
    r.headers["authorization"] = "Bearer " + key;
    auto refused = http::Admit(o, &r);
    CHECK_FALSE(refused);
    return r;
  };
  http::Request alice = admit("sk-alice-0001");
  CHECK(alice.client == "alice");
  CHECK_FALSE(alice.admin);
  http::Request root = admit("sk-root-00001");
  CHECK(root.client == "root");
  CHECK(root.admin);
  CHECK(http::MaySee(alice, true, "alice"));
  CHECK_FALSE(http::MaySee(alice, true, "bob"));
  CHECK_FALSE(http::MaySee(alice, true, ""));
  CHECK(http::MaySee(root, true, "bob"));
  CHECK(http::MaySee(root, true, ""));
  http::Request nobody;  // no client on a server with keys sees nothing
  CHECK_FALSE(http::MaySee(nobody, true, ""));
  CHECK(http::MaySee(nobody, false, "bob"));  // without keys, everyone sees everything
}

struct Fixture {
  explicit Fixture(std::shared_ptr<MemoryStore> s = std::make_shared<MemoryStore>(),
                   bool keyed = true)
      : store(std::move(s)) {
    rt::RuntimeOptions ro;
    ro.engines = {&engine};
    ro.store = store;
    runtime = std::move(rt::Runtime::Open(ro)).value();
    RunsOptions o;
    o.runtime = runtime.get();
    o.max_programs = 2;
    o.max_queued = 8;
    o.keyed = keyed;
    service = std::make_unique<RunsService>(o);
    service->AddRoutes(&router);
  }
  ~Fixture() {
    service->Stop();
    service.reset();
    runtime.reset();
  }
  // `who`: the client; "root" is the admin.
  http::Response Call(const std::string& who, const std::string& method, const std::string& path,
                      const json& body = {}, std::map<std::string, std::string> query = {}) {
    http::Request r;
    r.method = method;
    r.path = path;
    r.target = path;
    r.query = std::move(query);
    r.client = who;
    r.admin = who == "root";
    if (!body.is_null()) r.body = body.dump();
    return router.Handle(r);
  }
  json State(const std::string& who, const std::string& id) {
    return json::parse(Call(who, "GET", "/v1/runs/" + id).body);
  }
  json WaitRun(const std::string& who, const std::string& id) {
    const auto deadline = std::chrono::steady_clock::now() + kHang;
    while (std::chrono::steady_clock::now() < deadline) {
      json j = State(who, id);
      if (j["state"] != "queued" && j["state"] != "running") return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return State(who, id);
  }
  bool WaitSubmitted(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + kHang;
    while (engine.submitted().size() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  std::set<std::string> Listed(const std::string& who) {
    std::set<std::string> ids;
    const json list = json::parse(Call(who, "GET", "/v1/runs").body);
    for (const json& r : list["runs"]) ids.insert(r["id"].get<std::string>());
    return ids;
  }

  std::shared_ptr<MemoryStore> store;
  FakeEngine engine;
  std::unique_ptr<rt::Runtime> runtime;
  std::unique_ptr<RunsService> service;
  http::Router router;
};

const json kDag = {
    {"functions", {{"shout", {{"template", "Shout: {{x}}\n{{gen out max_tokens=8}}"}}}}},
    {"calls", {{{"id", "a"}, {"function", "shout"}, {"inputs", {{"x", "hello"}}}}}},
    {"outputs", {"a.out"}},
    {"detached", true}};

const char* kProgram = R"(
local f = braid.fn [[Say {{w}}: {{gen out max_tokens=4}}]]
return function(w) return f{ w = w }.out:get() end)";

TEST_CASE("another client's runs and sessions are 404 on every route; admins see all") {
  Fixture f;
  // Alice: a finished DAG, a program held in the engine, and a session.
  const std::string done = json::parse(f.Call("alice", "POST", "/v1/dags", kDag).body)["id"];
  REQUIRE(f.WaitRun("alice", done)["state"] == "done");
  f.engine.hold = true;
  http::Response p = f.Call("alice", "POST", "/v1/programs",
                            {{"source", kProgram}, {"args", {"hi"}}, {"detached", true}});
  REQUIRE(p.status == 202);
  const std::string held = json::parse(p.body)["id"];
  REQUIRE(f.WaitSubmitted(2));
  const std::string sid =
      json::parse(f.Call("alice", "POST", "/v1/sessions", json::object()).body)["id"];
  const std::string base = "/v1/sessions/" + sid;
  REQUIRE(f.Call("alice", "POST", base + "/functions",
                 {{"name", "echo"}, {"template", "Echo {{q}}{{gen a max_tokens=4}}"}})
              .status == 201);
  const auto var =
      json::parse(f.Call("alice", "POST", base + "/vars", {{"value", "secret"}}).body)["var"]
          .get<int>();
  const std::string v = base + "/vars/" + std::to_string(var);
  // Bob's own run, for the lists.
  const std::string bobs = json::parse(f.Call("bob", "POST", "/v1/dags", kDag).body)["id"];

  // Bob: every route on Alice's ids answers as for an id that does not exist,
  // word for word but the id.
  auto same_as_missing = [&](const std::string& method, const std::string& prefix,
                             const std::string& id, const std::string& suffix,
                             const json& body = {}) {
    http::Response theirs = f.Call("bob", method, prefix + id + suffix, body);
    http::Response none = f.Call("bob", method, prefix + "run-none" + suffix, body);
    CHECK_MESSAGE(theirs.status == 404,
                  method << " " << prefix << id << suffix << ": " << theirs.body);
    CHECK(none.status == 404);
    std::string a = json::parse(theirs.body)["error"]["message"];
    const std::string b = json::parse(none.body)["error"]["message"];
    if (size_t at = a.find(id); at != std::string::npos) a.replace(at, id.size(), "run-none");
    CHECK(a == b);
  };
  for (const std::string& id : {done, held, sid}) {
    same_as_missing("GET", "/v1/runs/", id, "");
    same_as_missing("GET", "/v1/runs/", id, "/events");
    same_as_missing("GET", "/v1/runs/", id, "/graph");
    same_as_missing("POST", "/v1/runs/", id, "/cancel");
    same_as_missing("DELETE", "/v1/runs/", id, "");
  }
  const std::string vars = "/vars/" + std::to_string(var);
  same_as_missing("POST", "/v1/sessions/", sid, "/functions",
                  {{"name", "x"}, {"template", "{{gen o}}"}});
  same_as_missing("POST", "/v1/sessions/", sid, "/vars", json::object());
  same_as_missing("PUT", "/v1/sessions/", sid, vars, {{"value", "changed"}});
  same_as_missing("GET", "/v1/sessions/", sid, vars);
  same_as_missing("POST", "/v1/sessions/", sid, "/calls", {{"function", "echo"}});
  same_as_missing("POST", "/v1/sessions/", sid, "/eval", {{"source", "1"}});
  same_as_missing("POST", "/v1/sessions/", sid, "/interrupt");
  same_as_missing("DELETE", "/v1/sessions/", sid, "");

  // Nothing of Alice's changed: her run still runs, her variable is hers.
  CHECK(f.State("alice", held)["state"] == "running");
  json got = json::parse(f.Call("alice", "GET", v).body);
  CHECK(got["value"] == "secret");
  CHECK(f.State("alice", done)["result"]["a.out"] == "<13>");

  // Lists: each client its own; the admin everything.
  CHECK(f.Listed("alice") == std::set<std::string>{done, held, sid});
  CHECK(f.Listed("bob") == std::set<std::string>{bobs});
  CHECK(f.Listed("root") == std::set<std::string>{done, held, sid, bobs});
  CHECK(f.State("root", held)["client"] == "alice");
  CHECK(f.Call("root", "GET", "/v1/runs/" + held + "/graph", {}, {{"format", "dot"}}).status ==
        200);
  http::Response ev = f.Call("root", "GET", "/v1/runs/" + done + "/events");
  CHECK(ev.status == 200);
  CHECK(ev.stream);
  CHECK(json::parse(f.Call("root", "GET", v).body)["value"] == "secret");
  // The admin may cancel anyone's run.
  CHECK(f.Call("root", "POST", "/v1/runs/" + held + "/cancel").status == 200);
  CHECK(f.WaitRun("alice", held)["state"] == "cancelled");
  CHECK(f.Call("alice", "DELETE", base).status == 200);
  f.engine.hold = false;
  f.engine.Release();
}

TEST_CASE("runs only in the store: owners kept; braid run's runs are the admin's to see") {
  auto store = std::make_shared<MemoryStore>();
  std::string alices;
  {
    Fixture f(store);
    alices = json::parse(f.Call("alice", "POST", "/v1/dags", kDag).body)["id"];
    REQUIRE(f.WaitRun("alice", alices)["state"] == "done");
  }
  Fixture g(store);
  // A run of braid run in the same store: no client.
  rt::RunOptions local;
  local.program = "/home/me/app.lua";
  auto run = g.runtime->StartRun(local);
  REQUIRE(run.ok());
  const std::string cli = (*run)->id();
  (*run)->Finish(Status::Ok());

  CHECK(g.Call("alice", "GET", "/v1/runs/" + alices).status == 200);
  CHECK(json::parse(g.Call("alice", "GET", "/v1/runs/" + alices).body)["client"] == "alice");
  CHECK(g.Call("bob", "GET", "/v1/runs/" + alices).status == 404);
  CHECK(g.Call("alice", "GET", "/v1/runs/" + cli).status == 404);
  CHECK(g.Call("root", "GET", "/v1/runs/" + cli).status == 200);
  CHECK(g.Listed("alice") == std::set<std::string>{alices});
  CHECK(g.Listed("bob").empty());
  CHECK(g.Listed("root") == std::set<std::string>{alices, cli});
}

TEST_CASE("a resumed run keeps its client and stays its owner's") {
  auto store = std::make_shared<MemoryStore>();
  std::string id;
  {
    Fixture f(store);
    f.engine.hold = true;
    id = json::parse(f.Call("alice", "POST", "/v1/dags", kDag).body)["id"];
    REQUIRE(f.WaitSubmitted(1));
  }
  Fixture g(store);
  auto n = g.service->ResumeInterrupted();
  REQUIRE(n.ok());
  CHECK(*n == 1);
  json done = g.WaitRun("alice", id);
  CHECK(done["state"] == "done");
  CHECK(done["client"] == "alice");
  // The engines hear the run's client again, not an anonymous one.
  REQUIRE_FALSE(g.engine.submitted().empty());
  CHECK(g.engine.submitted().back().request.client == "alice");
  CHECK(g.Call("bob", "GET", "/v1/runs/" + id).status == 404);
  CHECK(g.Listed("bob").empty());
}

TEST_CASE("without keys everyone sees every run, and each keyless run is its own client") {
  Fixture f(std::make_shared<MemoryStore>(), /*keyed=*/false);
  const std::string a = json::parse(f.Call("", "POST", "/v1/dags", kDag).body)["id"];
  const std::string b = json::parse(f.Call("", "POST", "/v1/dags", kDag).body)["id"];
  REQUIRE(f.WaitRun("", a)["state"] == "done");
  REQUIRE(f.WaitRun("", b)["state"] == "done");
  CHECK(f.Listed("") == std::set<std::string>{a, b});
  CHECK(f.Call("someone", "GET", "/v1/runs/" + a).status == 200);
  // The engines hear each run as a client of its own (its id).
  std::set<std::string> clients;
  for (const auto& s : f.engine.submitted()) clients.insert(s.request.client);
  CHECK(clients == std::set<std::string>{a, b});
}

TEST_CASE("stats and metrics carry no other client's name") {
  EngineStats e;
  e.running = 2;
  e.generated_tokens = 30;
  e.clients = {{.client = "alice", .generated_tokens = 10},
               {.client = "bob", .generated_tokens = 20}};
  http::StatsHistory history("m", {{"engine0", "m.gguf", "cpu"}});
  history.Record(1000, {e}, {});
  const std::string alice = "alice";
  json only = json::parse(history.Json(0, &alice));
  REQUIRE(only["samples"].size() == 1);
  CHECK(only["samples"][0]["clients"].size() == 1);
  CHECK(only["samples"][0]["clients"][0]["client"] == "alice");
  CHECK(only["samples"][0]["engines"][0]["generated_tokens"] == 30);  // the totals stay
  CHECK(history.Json(0, &alice).find("bob") == std::string::npos);
  CHECK(json::parse(history.Json(0))["samples"][0]["clients"].size() == 2);

  http::ServingMetrics metrics;
  metrics.ObserveRequest("alice", 5, 7);
  metrics.ObserveRequest("bob", 3, 4);
  http::MetricsSnapshot snap = metrics.Snapshot();
  std::vector<EngineStats> engines = {e};
  http::KeepOnlyClient("alice", &snap, &engines);
  const std::string text = http::RenderPrometheus(snap, engines, "m");
  CHECK(text.find("bob") == std::string::npos);
  CHECK(text.find("client=\"alice\"") != std::string::npos);
  CHECK(text.find("braid:generation_tokens_total{model_name=\"m\"} 11") != std::string::npos);
}

}  // namespace
}  // namespace braid::server
