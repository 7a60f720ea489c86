// The order of a pass's ready nodes: task groups held until complete, then
// latency before throughput, higher priority first, a group's age its
// oldest member's.
#include "exec/dispatch_order.h"

#include <doctest/doctest.h>

namespace braid::rt {
namespace {

// A waiting node with the given goal; kJoin, since the order reads no function.
NodeId Add(Dag& dag, Criteria goal = Criteria::kThroughput, int priority = 0, int group = 0) {
  DagNode n;
  n.kind = DagNode::Kind::kJoin;
  n.goal = goal;
  n.priority = priority;
  n.group = group;
  n.wanted = true;
  return dag.AddNode(std::move(n));
}

TEST_CASE("DispatchOrder: latency first, then priority, then age") {
  Dag dag;
  const NodeId a = Add(dag);
  const NodeId b = Add(dag, Criteria::kThroughput, 5);
  const NodeId c = Add(dag, Criteria::kLatency, 1);
  const NodeId d = Add(dag, Criteria::kLatency, 1);
  CHECK(DispatchOrder(dag, {a, b, c, d}) == std::vector<NodeId>{c, d, b, a});
}

TEST_CASE("DispatchOrder: a task group waits for its pending members, then goes together") {
  Dag dag;
  const NodeId g1 = Add(dag, Criteria::kThroughput, 0, 1);
  const NodeId solo = Add(dag);
  const NodeId g2 = Add(dag, Criteria::kThroughput, 0, 1);
  // g2 still waits for an input: g1 is held.
  CHECK(DispatchOrder(dag, {g1, solo}) == std::vector<NodeId>{solo});
  // A member nobody wants does not hold the group.
  dag.node(g2).wanted = false;
  CHECK(DispatchOrder(dag, {g1, solo}) == std::vector<NodeId>{g1, solo});
  dag.node(g2).wanted = true;
  // All ready: the group's age is its oldest member's, so g2 goes before solo.
  CHECK(DispatchOrder(dag, {g1, solo, g2}) == std::vector<NodeId>{g1, g2, solo});
  CHECK(DispatchOrder(dag, {}).empty());
}

}  // namespace
}  // namespace braid::rt
