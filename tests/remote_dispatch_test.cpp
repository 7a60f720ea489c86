// A runtime over a real remote engine (talking to a fake OpenAI-compatible
// server on loopback) and a local fake engine: free text goes to the server,
// choices stay local, and when the server goes away mid-stream its node
// moves to the local engine and the run completes.
#include <doctest/doctest.h>

#include <chrono>

#include "engine/open.h"
#include "remote/fake_openai_server.h"
#include "runtime/runtime.h"
#include "testing/fakes.h"

using namespace braid;
using namespace braid::rt;
using braid::remote::testing::FakeOpenAiServer;
using braid::rt::testing::FakeEngine;
using braid::rt::testing::FakeModel;
using braid::rt::testing::MemoryStore;

namespace {

std::shared_ptr<const SemanticFunction> Fn(const std::string& name, const std::string& prompt) {
  auto r = SemanticFunction::Parse({name, "", prompt, false});
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  return *r;
}

// Waits until v settles; the minute only bounds a hang.
VarState WaitFor(Run& run, VarId v) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (run.state(v) == VarState::kPending && std::chrono::steady_clock::now() < end)
    run.WaitAny({v}, 50);
  return run.state(v);
}

struct Stack {
  FakeOpenAiServer server;
  FakeModel tokenizer;
  std::unique_ptr<Engine> far;
  FakeEngine local;
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>();
  std::unique_ptr<Runtime> rt;

  Stack() {
    REQUIRE(server.ok());
    RemoteEngineOptions ro;
    ro.url = server.url();
    ro.model = "smollm2";
    ro.backoff_ms = 5;
    ro.health_interval_ms = 50;
    auto e = OpenRemoteEngine(ro);
    REQUIRE_MESSAGE(e.ok(), e.status().message());
    far = std::move(e).value();
    local.score = [](const std::string&, const std::vector<std::string>& choices) {
      std::vector<float> out;
      for (const auto& c : choices) out.push_back(c == "yes" ? -0.1f : -4.0f);
      return out;
    };
    RuntimeOptions o;
    o.engines = {far.get(), &local};  // the remote engine first: preferred on ties
    o.engine_names = {"far", "local"};
    o.tokenizer = &tokenizer;
    o.store = store;
    auto r = Runtime::Open(o);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    rt = std::move(r).value();
  }
  ~Stack() {
    rt.reset();  // the dispatcher before the engines it drives
    far->Shutdown();
  }
};

}  // namespace

TEST_CASE("remote dispatch: text from the server, choices from the local engine") {
  Stack st;
  auto run = *st.rt->StartRun({});
  auto fn = Fn("ask", "Q {{x}}: {{gen a max_tokens=8}} ok? {{select b choices=[\"yes\", \"no\"]}}");
  auto r = run->Call(*fn, {{"x", Arg::Text("one")}}, {"main", 0});
  REQUIRE(r.ok());
  REQUIRE(run->Want(r->at("b"), {}).ok());
  REQUIRE(WaitFor(*run, r->at("b")) == VarState::kReady);
  CHECK(run->value(r->at("a")) == "Hello!");
  CHECK(run->value(r->at("b")) == "yes");
  REQUIRE(st.server.completions() == 1);
  const auto body = st.server.requests().at(0).body;
  CHECK(body.find("\"prompt\":[81,32,111,110,101,58,32]") != std::string::npos);  // "Q one: "
  REQUIRE(st.local.submitted().size() == 1);
  CHECK_FALSE(st.local.submitted()[0].request.score_choices.empty());
  const NodeInfo n = run->Nodes().at(0);
  CHECK(n.generated_tokens >= 3);  // the server's usage, then the local choice
  run->Finish(Status::Ok());
}

TEST_CASE("remote dispatch: the server goes away mid-stream; the node moves and the run ends") {
  Stack st;
  FakeOpenAiServer::Reply dies = FakeOpenAiServer::Hello();
  dies.drop_after = 1;  // "Hel", then the connection drops
  st.server.Push(dies);
  st.server.health_status = 503;  // and /health stops answering well
  auto run = *st.rt->StartRun({});
  auto fn = Fn("say", "Say {{x}}: {{gen y}}");
  auto a = run->Call(*fn, {{"x", Arg::Text("hi")}}, {"main", 0});
  auto b = run->Call(*fn, {{"x", Arg::Var(a->at("y"))}}, {"main", 1});
  REQUIRE(run->Want(b->at("y"), {}).ok());
  REQUIRE(WaitFor(*run, b->at("y")) == VarState::kReady);
  CHECK_FALSE(st.far->alive());
  CHECK(st.server.completions() == 1);
  CHECK(st.local.submitted().size() == 2);         // a, moved; then b
  CHECK(run->value(a->at("y")).starts_with("<"));  // the local engine's answer
  const auto nodes = run->Nodes();
  CHECK(nodes.at(0).engine == "local");
  int moved = 0;
  for (const std::string& e : st.store->events(run->id())) moved += e.rfind("node_moved ", 0) == 0;
  CHECK(moved == 1);

  // The server answers again: the engine is alive and takes work again.
  st.server.health_status = 200;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!st.far->alive() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(st.far->alive());
  // Two calls one after the other: idle engines holding no prefix of them
  // take turns, so one of the two goes to the server.
  int from_server = 0;
  for (int i = 0; i < 2; ++i) {
    auto c = run->Call(*fn, {{"x", Arg::Text("again")}}, {"main", 2 + i});
    REQUIRE(run->Want(c->at("y"), {}).ok());
    REQUIRE(WaitFor(*run, c->at("y")) == VarState::kReady);
    from_server += run->value(c->at("y")) == "Hello!";
  }
  CHECK(from_server == 1);
  CHECK(st.server.completions() == 2);
  run->Finish(Status::Ok());
}
