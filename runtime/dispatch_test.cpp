// Dispatch over engines of different kinds: outputs that need the model in
// this process (select, regex) never go to a remote engine, engines that are
// not alive are skipped, a node whose engine died moves elsewhere, and a full
// engine passes work on or makes it wait; placement by cached prefix or in
// turn.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>

#include "runtime/runtime.h"
#include "testing/fakes.h"

using namespace braid;
using namespace braid::rt;
using braid::rt::testing::FakeEngine;
using braid::rt::testing::FakeModel;
using braid::rt::testing::MemoryStore;

namespace {

std::shared_ptr<const SemanticFunction> Fn(const std::string& name, const std::string& prompt) {
  auto r = SemanticFunction::Parse({name, "", prompt, false});
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  return *r;
}

// A runtime over `engines` named e0, e1, ... that tokenizes with its own
// model (the first engine may be remote).
struct Cluster {
  FakeModel tokenizer;
  std::vector<std::unique_ptr<FakeEngine>> engines;
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>();
  std::unique_ptr<Runtime> rt;

  explicit Cluster(std::vector<bool> remote, Placement placement = Placement::kAffinity) {
    RuntimeOptions o;
    o.placement = placement;
    for (size_t i = 0; i < remote.size(); ++i) {
      engines.push_back(std::make_unique<FakeEngine>());
      engines.back()->remote = remote[i];
      o.engines.push_back(engines.back().get());
      o.engine_names.push_back("e" + std::to_string(i));
    }
    o.tokenizer = &tokenizer;
    o.store = store;
    auto r = Runtime::Open(o);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    rt = std::move(r).value();
  }
  FakeEngine& operator[](size_t i) { return *engines[i]; }
  std::shared_ptr<Run> Start() {
    auto r = rt->StartRun({});
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    return *r;
  }
};

// Waits until v settles; the minute only bounds a hang.
VarState WaitFor(Run& run, VarId v) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (run.state(v) == VarState::kPending && std::chrono::steady_clock::now() < end)
    run.WaitAny({v}, 50);
  return run.state(v);
}

int CountEvents(MemoryStore& store, const std::string& run, const std::string& kind) {
  int n = 0;
  for (const std::string& e : store.events(run)) n += e.rfind(kind + " ", 0) == 0;
  return n;
}

}  // namespace

TEST_CASE("dispatch: select and regex outputs go only to engines that run the model here") {
  Cluster cl({true, false});  // e0 remote (preferred: lowest index), e1 local
  cl[1].score = [](const std::string&, const std::vector<std::string>& choices) {
    std::vector<float> out;
    for (const auto& c : choices) out.push_back(c == "bad" ? -0.5f : -3.0f);
    return out;
  };
  cl[1].respond = [](const std::string& p) {
    return p.find("Year") != std::string::npos ? "1999" : "text";
  };
  auto run = cl.Start();
  auto gen = Fn("say", "Say {{x}}: {{gen y}}");
  auto pick = Fn("pick", "Mood of {{x}}? {{select mood choices=[\"good\", \"bad\"]}}");
  auto year = Fn("year", "Year of {{x}}? {{regex y pattern=\"[0-9]{4}\"}}");
  // A call whose first output is free text and whose second is a choice:
  // the second leaves the remote engine for a local one.
  auto both =
      Fn("both", "About {{x}}: {{gen why max_tokens=4}} so {{select v choices=[\"bad\", \"ok\"]}}");
  std::vector<VarId> wanted;
  for (int i = 0; i < 3; ++i) {
    const std::string x = "item" + std::to_string(i);
    wanted.push_back((*run->Call(*gen, {{"x", Arg::Text(x)}}, {"main", 4 * i})).at("y"));
    wanted.push_back((*run->Call(*pick, {{"x", Arg::Text(x)}}, {"main", 4 * i + 1})).at("mood"));
    wanted.push_back((*run->Call(*year, {{"x", Arg::Text(x)}}, {"main", 4 * i + 2})).at("y"));
    wanted.push_back((*run->Call(*both, {{"x", Arg::Text(x)}}, {"main", 4 * i + 3})).at("v"));
  }
  for (VarId v : wanted) REQUIRE(run->Want(v, {}).ok());
  for (VarId v : wanted) {
    CAPTURE(v);
    CHECK(WaitFor(*run, v) == VarState::kReady);
    CHECK(run->error(v).empty());
  }
  CHECK(run->value(wanted[1]) == "bad");
  CHECK(run->value(wanted[2]) == "1999");
  int remote_gens = 0;
  for (const auto& s : cl[0].submitted()) {
    CHECK(s.request.score_choices.empty());
    CHECK_FALSE(s.request.logits_processor);
    ++remote_gens;
  }
  CHECK(remote_gens >= 1);  // free text may go anywhere, the remote engine included
  int scored = 0, masked = 0;
  for (const auto& s : cl[1].submitted()) {
    scored += !s.request.score_choices.empty();
    masked += bool(s.request.logits_processor);
  }
  CHECK(scored == 6);  // three picks and three "both"
  CHECK(masked == 3);
  run->Finish(Status::Ok());
}

TEST_CASE("dispatch: with only remote engines a select node fails, saying why") {
  Cluster cl({true, true});
  auto run = cl.Start();
  auto pick = Fn("pick", "Mood? {{select mood choices=[\"good\", \"bad\"]}}");
  auto a = run->Call(*pick, {}, {"main", 0});
  REQUIRE(run->Want(a->at("mood"), {}).ok());
  CHECK(WaitFor(*run, a->at("mood")) == VarState::kFailed);
  const std::string e = run->error(a->at("mood"));
  CHECK(e.find("select and regex outputs need an engine that runs its model in this process") !=
        std::string::npos);
  CHECK(e.find("e0 is remote, e1 is remote") != std::string::npos);
  CHECK(cl[0].submitted().empty());
  CHECK(cl[1].submitted().empty());
}

TEST_CASE("dispatch: engines that are not alive are skipped") {
  Cluster cl({true, false});
  cl[0].dead = true;
  auto run = cl.Start();
  auto gen = Fn("say", "Say {{x}}: {{gen y}}");
  std::vector<VarId> ys;
  for (int i = 0; i < 4; ++i)
    ys.push_back((*run->Call(*gen, {{"x", Arg::Text(std::to_string(i))}}, {"main", i})).at("y"));
  for (VarId y : ys) REQUIRE(run->Want(y, {}).ok());
  for (VarId y : ys) CHECK(WaitFor(*run, y) == VarState::kReady);
  CHECK(cl[0].submitted().empty());
  CHECK(cl[1].submitted().size() == 4);
}

TEST_CASE("dispatch: a node whose engine died moves to another engine and the run completes") {
  Cluster cl({true, false});
  cl[0].crash_next = true;
  auto run = cl.Start();
  // Watchers hear no failure for the moved node: it runs on elsewhere.
  std::atomic<int> failures{0};
  run->Watch([&failures](const RunEvent& e) { failures += e.kind == RunEvent::Kind::kNodeFailed; });
  auto gen = Fn("say", "Say {{x}}: {{gen y}}");
  auto a = run->Call(*gen, {{"x", Arg::Text("hi")}}, {"main", 0});
  auto b = run->Call(*gen, {{"x", Arg::Var(a->at("y"))}}, {"main", 1});
  REQUIRE(run->Want(b->at("y"), {}).ok());
  REQUIRE(WaitFor(*run, b->at("y")) == VarState::kReady);
  CHECK(run->value(a->at("y")).starts_with("<"));
  CHECK_FALSE(cl[0].alive());
  CHECK(cl[0].submitted().size() == 1);  // the crash
  CHECK(cl[1].submitted().size() == 2);  // a again, then b
  const auto nodes = run->Nodes();
  CHECK(nodes.at(0).engine == "e1");
  CHECK(nodes.at(0).error.empty());
  CHECK(CountEvents(*cl.store, run->id(), "node_moved") == 1);
  CHECK(CountEvents(*cl.store, run->id(), "node_failed") == 0);
  run->Watch(nullptr);
  CHECK(failures == 0);
  run->Finish(Status::Ok());
}

TEST_CASE("dispatch: a node moves at most twice; then it fails with the engines' errors") {
  Cluster cl({true, true, true});
  for (size_t i = 0; i < 3; ++i) cl[i].crash_next = true;
  auto run = cl.Start();
  auto gen = Fn("say", "Say {{x}}: {{gen y}}");
  auto a = run->Call(*gen, {{"x", Arg::Text("hi")}}, {"main", 0});
  REQUIRE(run->Want(a->at("y"), {}).ok());
  CHECK(WaitFor(*run, a->at("y")) == VarState::kFailed);
  CHECK(run->error(a->at("y")).find("the connection was reset") != std::string::npos);
  for (size_t i = 0; i < 3; ++i) CHECK(cl[i].submitted().size() == 1);
  CHECK(CountEvents(*cl.store, run->id(), "node_moved") == 2);

  // When every engine is down the move itself fails, saying so.
  Cluster two({true, true});
  two[0].crash_next = true;
  two[1].dead = true;
  auto run2 = two.Start();
  auto c = run2->Call(*gen, {{"x", Arg::Text("hi")}}, {"main", 0});
  REQUIRE(run2->Want(c->at("y"), {}).ok());
  CHECK(WaitFor(*run2, c->at("y")) == VarState::kFailed);
  const std::string e = run2->error(c->at("y"));
  CHECK(e.find("e0 is not alive after: the connection was reset") != std::string::npos);
  CHECK(e.find("e0 is not alive, e1 is not alive") != std::string::npos);
}

TEST_CASE("dispatch: a full engine passes the request on; when all are full the node waits") {
  Cluster cl({true, false});
  cl[0].refuse_next = 1;
  auto run = cl.Start();
  auto gen = Fn("say", "Say {{x}}: {{gen y}}");
  auto a = run->Call(*gen, {{"x", Arg::Text("hi")}}, {"main", 0});
  REQUIRE(run->Want(a->at("y"), {}).ok());
  REQUIRE(WaitFor(*run, a->at("y")) == VarState::kReady);
  CHECK(cl[0].submitted().empty());
  CHECK(cl[1].submitted().size() == 1);
  CHECK(run->Nodes().at(0).engine == "e1");

  // Both full for a while: the node is sent again until one takes it.
  cl[0].refuse_next = 3;
  cl[1].refuse_next = 3;
  auto b = run->Call(*gen, {{"x", Arg::Text("again")}}, {"main", 1});
  REQUIRE(run->Want(b->at("y"), {}).ok());
  REQUIRE(WaitFor(*run, b->at("y")) == VarState::kReady);
  CHECK(run->error(b->at("y")).empty());
  CHECK(cl[0].refuse_next + cl[1].refuse_next < 6);
  CHECK(cl[0].submitted().size() + cl[1].submitted().size() == 2);
  run->Finish(Status::Ok());
}

TEST_CASE(
    "dispatch: affinity sends a prompt to the engine holding its prefix; round-robin does not") {
  const std::string doc(400, 'd');  // a long shared document, one token per byte
  auto gen = Fn("ask", "{{doc}} Question {{q}}: {{gen a}}");
  auto ask_four = [&](Cluster& cl) {
    auto run = cl.Start();
    for (int i = 0; i < 4; ++i) {  // one at a time: no engine is busier than another
      auto r = run->Call(*gen, {{"doc", Arg::Text(doc)}, {"q", Arg::Text(std::to_string(i))}},
                         {"main", i});
      REQUIRE(run->Want(r->at("a"), {}).ok());
      REQUIRE(WaitFor(*run, r->at("a")) == VarState::kReady);
    }
    run->Finish(Status::Ok());
  };
  Cluster affinity({false, false});
  ask_four(affinity);
  CHECK(affinity[0].submitted().size() == 4);
  CHECK(affinity[1].submitted().empty());
  CHECK(affinity[0].submitted().back().cached >= 400);

  Cluster turns({false, false}, Placement::kRoundRobin);
  ask_four(turns);
  CHECK(turns[0].submitted().size() == 2);
  CHECK(turns[1].submitted().size() == 2);
}
