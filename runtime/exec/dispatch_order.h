// Which ready nodes of a run go in this pass, and in what order (DAG mode).
//
// Task groups go as a unit: a member is held until every pending, wanted
// member of its group is ready. The rest follow the engine's own order
// (MoreUrgent): latency first, then priority, then deadline, then age,
// where a task group's age is its oldest member's so that the group goes
// together. A pure function of the DAG (which the caller guards).
#pragma once

#include <vector>

#include "graph/dag.h"

namespace braid::rt {

// `ready`: the ready nodes, in node (program) order.
std::vector<NodeId> DispatchOrder(const Dag& dag, const std::vector<NodeId>& ready);

}  // namespace braid::rt
