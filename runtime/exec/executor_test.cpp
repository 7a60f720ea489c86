// The executor on its own, over a hand-built DAG and a fake engine: a ready
// call is submitted and completes, failure reaches everything downstream,
// lazy calls wait to be wanted, cancellation, and a call no engine can take.
#include "exec/executor.h"

#include <doctest/doctest.h>

#include <thread>

#include "testing/fakes.h"

namespace braid::rt {
namespace {

using testing::FakeEngine;

struct Harness {
  FakeEngine engine;
  std::shared_ptr<RuntimeContext> ctx = std::make_shared<RuntimeContext>();
  RunOptions options;
  Dag dag;
  std::condition_variable changed;
  std::unique_ptr<Executor> executor;

  explicit Harness(Mode mode = Mode::kDag) {
    ctx->placement =
        std::make_shared<EnginePlacement>(PlacementEngines({&engine}), Placement::kAffinity);
    ctx->tokenizer = engine.model();
    options.mode = mode;
    executor = std::make_unique<Executor>(
        ExecutedRun{ctx, "run-1", &options, false, Clock::now(), &dag, &changed,
                    std::make_shared<RunEvents>(nullptr, "run-1")});
  }
  // A call of `prompt` whose inputs are `args`; returns its first output.
  VarId Call(const std::string& prompt, std::map<std::string, Arg> args = {}, bool lazy = false) {
    auto fn = SemanticFunction::Parse({"f", "", prompt, lazy});
    REQUIRE_MESSAGE(fn.ok(), fn.status().message());
    DagNode node;
    node.label = "f";
    node.fn = *fn;
    node.args = std::move(args);
    for (const auto& [name, arg] : node.args)
      if (arg.var) node.inputs.push_back(arg.var);
    const NodeId id = dag.AddNode(std::move(node));
    VarId first = 0;
    for (const auto& o : (*fn)->outputs()) {
      const VarId v = dag.AddVar(o.name, id);
      dag.AttachOutput(id, v);
      if (!first) first = v;
    }
    return first;
  }
  // Pumps until the executor has nothing in flight (the fake engine answers
  // at once, through the inbox).
  void Settle() {
    for (int i = 0; i < 10; ++i) executor->Pump();
  }
};

TEST_CASE("Executor: a ready call goes to the engine and its output becomes ready") {
  Harness h;
  const VarId out = h.Call("Say: {{gen out max_tokens=4}}");
  h.Settle();
  REQUIRE(h.engine.submitted().size() == 1);
  CHECK(h.engine.submitted()[0].prompt == "Say: ");
  CHECK(h.engine.submitted()[0].request.program == "run-1");
  CHECK(h.dag.var(out).state == VarState::kReady);
  CHECK(h.dag.var(out).value == "<5>");
  const DagNode& n = h.dag.node(1);
  CHECK(n.state == NodeState::kDone);
  CHECK(n.engine == "engine0");
  CHECK(n.prompt_tokens == 5);
  CHECK(h.executor->Idle());
  CHECK(h.ctx->engine(0).in_flight->load() == 0);
}

TEST_CASE("Executor: a failure reaches everything downstream, and only that") {
  Harness h;
  const VarId bad = h.Call("FAIL {{gen x}}");
  const VarId after = h.Call("Use {{x}}: {{gen y}}", {{"x", Arg{bad, ""}}});
  const VarId other = h.Call("Other: {{gen z}}");
  h.Settle();
  CHECK(h.dag.var(bad).state == VarState::kFailed);
  CHECK(h.dag.var(bad).error == "node f#1 failed: fake engine failure");
  CHECK(h.dag.node(1).error == "fake engine failure");
  CHECK(h.dag.var(after).state == VarState::kFailed);
  CHECK(h.dag.var(after).error == "node f#1 failed: fake engine failure");
  CHECK(h.dag.var(other).state == VarState::kReady);
  CHECK(h.engine.submitted().size() == 2);  // the dependent call never ran
}

TEST_CASE("Executor: a lazy call waits until it is wanted") {
  Harness h;
  const VarId out = h.Call("Maybe: {{gen m}}", {}, /*lazy=*/true);
  h.Settle();
  CHECK(h.engine.submitted().empty());
  CHECK(h.dag.var(out).state == VarState::kPending);
  h.dag.node(1).wanted = true;
  h.Settle();
  CHECK(h.dag.var(out).state == VarState::kReady);
}

TEST_CASE("Executor: Cancel cancels what is in flight and every unfinished node") {
  Harness h;
  h.engine.hold = true;
  const VarId out = h.Call("Slow: {{gen s}}");
  h.executor->Pump();
  REQUIRE(h.engine.submitted().size() == 1);
  CHECK(h.dag.node(1).state == NodeState::kRunning);
  CHECK(h.ctx->engine(0).in_flight->load() == 1);
  CHECK_FALSE(h.executor->Idle());
  CHECK(h.executor->Live(1).run_ms.has_value());
  h.executor->Cancel();
  CHECK(h.executor->Idle());
  CHECK(h.ctx->engine(0).in_flight->load() == 0);
  CHECK(h.dag.node(1).state == NodeState::kCancelled);
  CHECK(h.dag.var(out).state == VarState::kCancelled);
  h.engine.Release();  // a late reply finds nothing to complete
  h.Settle();
  CHECK(h.dag.var(out).state == VarState::kCancelled);
}

TEST_CASE("Executor: a call no engine can take fails, naming each engine") {
  Harness h;
  h.engine.dead = true;
  const VarId out = h.Call("Hello {{gen g}}");
  h.Settle();
  CHECK(h.dag.var(out).state == VarState::kFailed);
  CHECK(h.dag.node(1).error == "no engine can take it: engine0 is not alive");
}

TEST_CASE("Executor: a baseline call is sent after half the client's round trip") {
  Harness h(Mode::kBaselineAsync);
  h.options.rtt_ms = 40;
  const VarId out = h.Call("Ping {{gen p}}");
  const auto next = h.executor->Pump();
  REQUIRE(next.has_value());  // the request's way out
  CHECK(h.engine.submitted().empty());
  CHECK(h.dag.node(1).state == NodeState::kReady);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (h.dag.var(out).state == VarState::kPending && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    h.executor->Pump();
  }
  CHECK(h.dag.var(out).state == VarState::kReady);
  CHECK(h.engine.submitted().size() == 1);
}

}  // namespace
}  // namespace braid::rt
