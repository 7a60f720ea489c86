// libFuzzer target for POST /v1/dags' parser: the input is a DAG's JSON.
// ParseDag must fail cleanly (InvalidArgument, or ResourceExhausted for a
// limit) or give a plan that is consistent (every ref comes before its use)
// and that BuildDag turns into a run over a fake engine, wanting one
// variable per output; sanitizers catch the rest.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "server/dag_json.h"
#include "testing/fakes.h"

namespace {

using namespace braid;

void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_dag_json: %s\n", what);
  std::abort();
}

// One runtime over a fake engine for the whole process (never destroyed:
// its threads outlive the fuzzer's static destructors otherwise).
rt::Runtime& FuzzRuntime() {
  static rt::Runtime* runtime = [] {
    auto* engine = new rt::testing::FakeEngine;
    rt::RuntimeOptions ro;
    ro.engines = {engine};
    auto opened = rt::Runtime::Open(ro);
    if (!opened.ok()) Fail("cannot open the runtime");
    return std::move(opened).value().release();
  }();
  return *runtime;
}

// Every ref of the plan names a node listed before its user.
void CheckOrder(const server::DagPlan& plan) {
  std::set<std::string> seen;
  auto node_of = [](const std::string& ref) { return ref.substr(0, ref.find('.')); };
  for (const server::DagNodeSpec& n : plan.nodes) {
    for (const auto& [_, v] : n.inputs)
      if (!v.ref.empty() && !seen.count(node_of(v.ref))) Fail("an input ref before its node");
    for (const auto& v : n.parts)
      if (!v.ref.empty() && !seen.count(node_of(v.ref))) Fail("a join ref before its node");
    if (!n.join && !plan.functions.count(n.function)) Fail("a call of an unknown function");
    seen.insert(n.id);
  }
  for (const auto& o : plan.outputs)
    if (!seen.count(node_of(o.ref))) Fail("an output of an unknown node");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  server::DagLimits limits;
  limits.max_functions = 8;
  limits.max_nodes = 64;
  limits.max_edges = 256;
  limits.max_text_bytes = 4096;
  limits.max_depth = 16;
  auto plan = server::ParseDag(body, limits);
  if (!plan.ok()) {
    const StatusCode code = plan.status().code();
    if (code != StatusCode::kInvalidArgument && code != StatusCode::kTooLarge)
      Fail("an error that is neither InvalidArgument nor TooLarge");
    if (plan.status().message().empty()) Fail("an error without a message");
    return 0;
  }
  if (plan->functions.empty() || plan->outputs.empty()) Fail("a plan without functions or outputs");
  if (plan->nodes.size() > limits.max_nodes) Fail("more nodes than the limit");
  CheckOrder(*plan);

  rt::RunOptions ro;
  ro.program = "fuzz:dag";
  auto run = FuzzRuntime().StartRun(ro);
  if (!run.ok()) Fail("cannot start a run");
  auto outputs = server::BuildDag(*plan, **run);
  if (outputs.ok() && outputs->size() != plan->outputs.size())
    Fail("BuildDag wants a different number of outputs than the plan has");
  (*run)->Cancel();
  (*run)->Finish(outputs.ok() ? Status::Ok() : outputs.status());
  return 0;
}
