#include "exec/dispatch_order.h"

#include <algorithm>
#include <map>
#include <set>

#include "engine/request.h"

namespace braid::rt {

std::vector<NodeId> DispatchOrder(const Dag& dag, const std::vector<NodeId>& ready) {
  // Task groups go as a unit: hold members until every pending member is ready.
  const std::set<NodeId> ready_set(ready.begin(), ready.end());
  std::map<int, bool> group_complete;
  for (size_t i = 1; i <= dag.num_nodes(); ++i) {
    const DagNode& node = dag.node(i);
    if (!node.group) continue;
    auto [it, fresh] = group_complete.emplace(node.group, true);
    if (node.state == NodeState::kWaiting && node.wanted && !ready_set.count(i)) it->second = false;
  }
  std::vector<NodeId> go;
  for (NodeId n : ready)
    if (!dag.node(n).group || group_complete[dag.node(n).group]) go.push_back(n);
  // The engine's own order (MoreUrgent), a group's age its oldest member's.
  std::map<int, NodeId> group_first;
  for (NodeId n : go)
    if (int g = dag.node(n).group) group_first.emplace(g, n);  // `go` is in node order
  auto urgency = [&](NodeId n) {
    const DagNode& node = dag.node(n);
    return Urgency{node.goal == Criteria::kLatency ? GoalClass::kLatency : GoalClass::kThroughput,
                   node.priority, node.latest_finish_ms,
                   static_cast<double>(node.group ? group_first[node.group] : n), n};
  };
  std::sort(go.begin(), go.end(),
            [&](NodeId a, NodeId b) { return MoreUrgent(urgency(a), urgency(b)); });
  return go;
}

}  // namespace braid::rt
