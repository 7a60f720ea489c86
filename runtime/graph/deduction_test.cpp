// Golden DAGs for goal deduction: labels, task groups and deadline numbers.
#include "graph/deduction.h"

#include <doctest/doctest.h>

#include <map>

#include "exec/prefix_groups.h"

using namespace braid;
using namespace braid::rt;

namespace {

// A small DAG builder: call nodes with named outputs; costs per node label.
struct Golden {
  Dag dag;
  std::map<std::string, NodeId> node;
  std::map<std::string, VarId> out;  // label -> its output
  std::map<std::string, double> cost;
  int next_group = 0;

  NodeId Add(const std::string& label, const std::vector<std::string>& inputs, double c,
             DagNode::Kind kind = DagNode::Kind::kCall) {
    DagNode n;
    n.kind = kind;
    n.label = label;
    for (const auto& in : inputs) n.inputs.push_back(out.at(in));
    NodeId id = dag.AddNode(std::move(n));
    VarId v = dag.AddVar(label + ".out", id);
    dag.AttachOutput(id, v);
    node[label] = id;
    out[label] = v;
    cost[label] = c;
    return id;
  }
  VarId Lit(const std::string& name) {
    VarId v = dag.AddVar(name, 0);
    dag.var(v).state = VarState::kReady;
    out[name] = v;
    return v;
  }
  Status Want(const std::string& label, Criteria c, std::optional<double> deadline = {},
              double now = 0) {
    DeductionParams p;
    p.now_ms = now;
    p.cost_ms = [this](const DagNode& n) { return cost.at(n.label); };
    p.next_group = &next_group;
    GetOptions o;
    o.criteria = c;
    o.deadline_ms = deadline;
    return DeduceGoals(dag, out.at(label), o, p);
  }
  const DagNode& N(const std::string& label) { return dag.node(node.at(label)); }
};

// map-reduce: 4 maps -> join -> reduce; plus an unrelated "title" call.
void MapReduce(Golden& g) {
  g.Lit("doc");
  g.Add("map1", {"doc"}, 100);
  g.Add("map2", {"doc"}, 200);
  g.Add("map3", {"doc"}, 150);
  g.Add("map4", {"doc"}, 50);
  g.Add("join", {"map1", "map2", "map3", "map4"}, 0, DagNode::Kind::kJoin);
  g.Add("reduce", {"join"}, 300);
  g.Add("title", {"doc"}, 80);
}

}  // namespace

TEST_CASE("deduction: a latency want labels everything upstream, nothing else") {
  Golden g;
  MapReduce(g);
  REQUIRE(g.Want("reduce", Criteria::kLatency).ok());
  for (auto l : {"map1", "map2", "map3", "map4", "join", "reduce"}) {
    CHECK(g.N(l).wanted);
    CHECK(g.N(l).goal == Criteria::kLatency);
  }
  CHECK(!g.N("title").wanted);  // nobody wants it: it never runs
  // The four maps feed one consumer and are independent: one task group.
  const int grp = g.N("map1").group;
  CHECK(grp != 0);
  for (auto l : {"map2", "map3", "map4"}) CHECK(g.N(l).group == grp);
  CHECK(g.N("join").group == 0);
  CHECK(g.N("reduce").group == 0);
  // No deadline: no priorities.
  CHECK(g.N("reduce").priority == 0);
}

TEST_CASE("deduction: throughput never downgrades latency; latency upgrades throughput") {
  Golden g;
  g.Lit("doc");
  g.Add("a", {"doc"}, 10);
  g.Add("b", {"a"}, 10);
  g.Add("c", {"doc"}, 10);
  REQUIRE(g.Want("a", Criteria::kLatency).ok());
  REQUIRE(g.Want("b", Criteria::kThroughput).ok());
  CHECK(g.N("a").goal == Criteria::kLatency);  // already deduced latency: kept
  CHECK(g.N("b").goal == Criteria::kThroughput);
  REQUIRE(g.Want("c", Criteria::kThroughput).ok());
  CHECK(g.N("c").goal == Criteria::kThroughput);
  REQUIRE(g.Want("c", Criteria::kLatency).ok());
  CHECK(g.N("c").goal == Criteria::kLatency);  // a later latency want upgrades
  CHECK(g.N("a").group == 0);                  // single producers form no group
}

TEST_CASE("deduction: groups only of independent siblings") {
  Golden g;
  g.Lit("doc");
  g.Add("a", {"doc"}, 10);
  g.Add("b", {"a"}, 10);  // b depends on a
  g.Add("c", {"doc"}, 10);
  g.Add("z", {"a", "b", "c"}, 10);
  REQUIRE(g.Want("z", Criteria::kThroughput).ok());
  // a is upstream of b: a cannot be submitted with b; b and c can.
  CHECK(g.N("a").group == 0);
  CHECK(g.N("b").group != 0);
  CHECK(g.N("b").group == g.N("c").group);
  CHECK(g.N("z").goal == Criteria::kThroughput);
}

TEST_CASE("deduction: deadline split along the critical path (map-reduce)") {
  Golden g;
  MapReduce(g);
  // deadline 1000 ms at now = 5000: T = 6000.
  REQUIRE(g.Want("reduce", Criteria::kThroughput, 1000.0, 5000.0).ok());
  // reduce: tail 0 -> latest finish 6000, latest start 5700, slack 700.
  CHECK(g.N("reduce").goal == Criteria::kLatency);  // a deadline implies latency
  CHECK(*g.N("reduce").latest_finish_ms == doctest::Approx(6000));
  CHECK(g.N("reduce").latest_start_ms == doctest::Approx(5700));
  CHECK(g.N("reduce").slack_ms == doctest::Approx(700));
  CHECK(g.N("reduce").priority == 100000 - 700);
  // join costs 0: finish by 5700.
  CHECK(*g.N("join").latest_finish_ms == doctest::Approx(5700));
  CHECK(g.N("join").slack_ms == doctest::Approx(700));
  // maps: finish by 5700; map2 (200 ms) must start by 5500: the group's least
  // slack (500) is every member's slack and priority.
  CHECK(*g.N("map1").latest_finish_ms == doctest::Approx(5700));
  CHECK(g.N("map1").latest_start_ms == doctest::Approx(5600));
  CHECK(g.N("map2").latest_start_ms == doctest::Approx(5500));
  for (auto l : {"map1", "map2", "map3", "map4"}) {
    CHECK(g.N(l).slack_ms == doctest::Approx(500));
    CHECK(g.N(l).priority == 100000 - 500);
  }
  CHECK(!g.N("title").latest_finish_ms.has_value());
}

TEST_CASE(
    "deduction: deadline on a chain, tighter deadlines win, infeasible gives negative slack") {
  Golden g;
  g.Lit("q");
  g.Add("a", {"q"}, 200);
  g.Add("b", {"a"}, 300);
  g.Add("c", {"b"}, 100);
  REQUIRE(g.Want("c", Criteria::kLatency, 1000.0).ok());
  CHECK(g.N("c").slack_ms == doctest::Approx(900));
  CHECK(g.N("b").slack_ms == doctest::Approx(600));
  CHECK(g.N("a").slack_ms == doctest::Approx(400));
  CHECK(g.N("a").priority > g.N("b").priority);
  CHECK(g.N("b").priority > g.N("c").priority);
  // A looser later deadline keeps the tighter latest finish.
  REQUIRE(g.Want("c", Criteria::kLatency, 5000.0).ok());
  CHECK(g.N("a").slack_ms == doctest::Approx(400));
  // Wanting b with 400 ms: its path a+b = 500 ms does not fit.
  REQUIRE(g.Want("b", Criteria::kLatency, 400.0).ok());
  CHECK(*g.N("b").latest_finish_ms == doctest::Approx(400));
  CHECK(g.N("a").slack_ms == doctest::Approx(-100));
  CHECK(g.N("a").priority == 100100);
}

TEST_CASE("deduction: cost model and priorities") {
  CostModel m;  // defaults 400 / 100 tok/s
  CHECK(m.CostMs(400, 100) == doctest::Approx(2000));
  m.prefill_tokens_per_s = 0;  // unmeasured -> default
  CHECK(m.CostMs(200, 0) == doctest::Approx(500));
  CHECK(PriorityForSlack(0) == 100000);
  CHECK(PriorityForSlack(1e9) == 1);
  CHECK(PriorityForSlack(-1e9) == 1000000);
}

TEST_CASE("dag: unknown target, cycles named, downstream order") {
  Golden g;
  g.Lit("doc");
  g.Add("a", {"doc"}, 1);
  g.Add("b", {"a"}, 1);
  g.Add("h", {}, 0, DagNode::Kind::kHost);
  GetOptions o;
  DeductionParams p;
  CHECK(DeduceGoals(g.dag, 999, o, p).message() == "unknown variable 999");
  // h depends on b: fine. a depending on h would close a -> b -> h -> a.
  CHECK(g.dag.AddInput(g.node["h"], g.out["b"]).ok());
  Status s = g.dag.AddInput(g.node["a"], g.out["h"]);
  REQUIRE(!s.ok());
  CHECK(s.message() ==
        "dependency on 'h.out' (variable 4) would make a cycle: a#1 -> b#2 -> h#3 -> a#1");
  CHECK(!g.dag.FindCycle().has_value());
  CHECK(g.dag.Downstream(g.node["a"]) == std::vector<NodeId>{g.node["b"], g.node["h"]});
  CHECK(g.dag.Producers(g.node["h"]) == std::vector<NodeId>{g.node["b"]});
  CHECK(!g.dag.AddInput(g.node["a"], 77).ok());
}

TEST_CASE("prefix groups: clusters of prompts sharing a block") {
  std::vector<int32_t> base(20, 7);
  auto a = base, b = base, c = std::vector<int32_t>(20, 3), d = base;
  a.push_back(1);
  b.push_back(2);
  d.resize(10);  // shares only 10 tokens
  std::vector<const std::vector<int32_t>*> ps = {&a, &c, &b, &d};
  auto cl = ClusterByPrefix(ps, 16);
  REQUIRE(cl.size() == 1);
  CHECK(cl[0].leader == 0);
  CHECK(cl[0].followers == std::vector<size_t>{2});
  CHECK(cl[0].shared == 20);
  CHECK(CommonPrefix(a, d) == 10);
}

TEST_CASE("dag: a 200,000-node chain: walks are iterative, groups see indirect dependence") {
  // Recursion tied to the DAG's depth would overflow the stack here, and
  // per-node ancestor sets would need 2e10 entries.
  Golden g;
  g.Lit("doc");
  const int n = 200000;
  g.Add("n0", {"doc"}, 1);
  for (int i = 1; i < n; ++i) g.Add("n" + std::to_string(i), {"n" + std::to_string(i - 1)}, 1);
  // z reads the chain's first and last node, and an independent call:
  // n0 is upstream of the last one, so only the last one and "free" group.
  g.Add("free", {"doc"}, 1);
  g.Add("z", {"n0", "n" + std::to_string(n - 1), "free"}, 1);
  REQUIRE(g.Want("z", Criteria::kLatency, 1e6).ok());
  CHECK(g.N("n0").group == 0);
  CHECK(g.N("n" + std::to_string(n - 1)).group != 0);
  CHECK(g.N("n" + std::to_string(n - 1)).group == g.N("free").group);
  CHECK(g.N("n0").slack_ms < g.N("free").slack_ms);  // the critical path is the chain
  CHECK(g.dag.Downstream(g.node["n0"]).size() == static_cast<size_t>(n));  // the chain's rest + z
  Status s = g.dag.AddInput(g.node["n0"], g.out["n5"]);
  REQUIRE(!s.ok());
  CHECK(s.message().find(
            "would make a cycle: n0#1 -> n1#2 -> n2#3 -> n3#4 -> n4#5 -> n5#6 -> n0#1") !=
        std::string::npos);
}
