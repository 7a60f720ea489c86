#include "graph/deduction.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace braid::rt {

double CostModel::CostMs(double prompt_tokens, double max_tokens) const {
  const double prefill = prefill_tokens_per_s > 0 ? prefill_tokens_per_s : 400;
  const double decode = decode_tokens_per_s > 0 ? decode_tokens_per_s : 100;
  return 1000.0 * (prompt_tokens / prefill + max_tokens / decode);
}

int PriorityForSlack(double slack_ms) {
  const double p = 100000.0 - std::round(slack_ms);
  return static_cast<int>(std::clamp(p, 1.0, 1000000.0));
}

namespace {

// Post-order DFS over producers from `root`, skipping finished nodes.
// Returns the upstream set in topological order (producers first).
Status CollectUpstream(const Dag& dag, NodeId root, std::vector<NodeId>* order) {
  enum Mark { kNone, kGray, kBlack };
  std::vector<Mark> mark(dag.num_nodes() + 1, kNone);
  std::vector<NodeId> stack_path;
  // Iterative DFS with an explicit stack of (node, next producer index).
  std::vector<std::pair<NodeId, size_t>> stack;
  std::map<NodeId, std::vector<NodeId>> producers;
  auto push = [&](NodeId n) {
    mark[n] = kGray;
    producers[n] = dag.Producers(n);
    stack.emplace_back(n, 0);
  };
  if (dag.node(root).Finished()) return Status::Ok();
  push(root);
  while (!stack.empty()) {
    auto& [n, i] = stack.back();
    const auto& ps = producers[n];
    if (i < ps.size()) {
      NodeId p = ps[i++];
      if (dag.node(p).Finished() || mark[p] == kBlack) continue;
      if (mark[p] == kGray) {
        std::string names;
        bool on = false;
        for (const auto& entry : stack) {
          if (entry.first == p) on = true;
          if (on) names += dag.node(entry.first).Name() + " -> ";
        }
        names += dag.node(p).Name();
        return Status::InvalidArgument("cycle in the DAG: " + names);
      }
      push(p);
      continue;
    }
    mark[n] = kBlack;
    order->push_back(n);
    stack.pop_back();
  }
  return Status::Ok();
}

bool Pending(const DagNode& n) {
  return n.state == NodeState::kWaiting || n.state == NodeState::kReady;
}

}  // namespace

Status DeduceGoals(Dag& dag, VarId target, const GetOptions& options,
                   const DeductionParams& params) {
  if (!dag.HasVar(target))
    return Status::InvalidArgument("unknown variable " + std::to_string(target));
  const NodeId root = dag.var(target).producer;
  if (root == 0) return Status::Ok();  // a literal or host-set variable: nothing to run
  std::vector<NodeId> order;
  BRAID_RETURN_IF_ERROR(CollectUpstream(dag, root, &order));
  if (order.empty()) return Status::Ok();
  std::set<NodeId> in_set(order.begin(), order.end());

  // 1 + 2: activation and goal class.
  const bool latency = options.criteria == Criteria::kLatency || options.deadline_ms.has_value();
  for (NodeId n : order) {
    DagNode& node = dag.node(n);
    node.wanted = true;
    if (!params.goals) {
      node.goal = Criteria::kThroughput;
    } else if (latency) {
      node.goal = Criteria::kLatency;
    } else if (!node.goal_set) {
      node.goal = Criteria::kThroughput;
    }
    node.goal_set = true;
  }

  // 3: task groups of independent pending siblings.
  if (params.groups && params.next_group) {
    // A producer p of c is dependent when it is upstream of another
    // producer q of c. One walk up from c's producers' producers marks
    // what lies strictly upstream of them, staying inside the set and
    // above the earliest producer in topological order (nothing earlier
    // can be a producer of c). Memory stays linear in the DAG: per-node
    // ancestor sets are quadratic on a long chain.
    std::vector<size_t> position(dag.num_nodes() + 1, 0);  // 1 + index in order; 0 = outside
    for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i + 1;
    std::vector<size_t> marked(dag.num_nodes() + 1, 0);  // == stamp: upstream in this walk
    size_t stamp = 0;
    std::vector<NodeId> stack;
    for (NodeId c : order) {
      std::vector<NodeId> ps;
      for (NodeId p : dag.Producers(c))
        if (position[p]) ps.push_back(p);
      if (ps.size() < 2) continue;
      size_t lowest = position[ps[0]];
      for (NodeId p : ps) lowest = std::min(lowest, position[p]);
      ++stamp;
      for (NodeId q : ps)
        for (NodeId p : dag.Producers(q)) stack.push_back(p);
      while (!stack.empty()) {
        const NodeId at = stack.back();
        stack.pop_back();
        if (position[at] < lowest || marked[at] == stamp) continue;
        marked[at] = stamp;
        for (NodeId p : dag.Producers(at)) stack.push_back(p);
      }
      std::vector<NodeId> members;
      for (NodeId p : ps)
        if (Pending(dag.node(p)) && marked[p] != stamp) members.push_back(p);
      if (members.size() < 2) continue;
      int g = 0;
      for (NodeId m : members)
        if (dag.node(m).group) g = g ? g : dag.node(m).group;
      bool all_same = g != 0;
      for (NodeId m : members) all_same = all_same && dag.node(m).group == g;
      if (all_same) continue;
      const int fresh = ++*params.next_group;
      for (NodeId m : members)
        if (dag.node(m).group == 0) dag.node(m).group = fresh;
    }
  }

  // 4: the deadline split along the critical path.
  if (options.deadline_ms && params.goals) {
    const double T = params.now_ms + *options.deadline_ms;
    std::map<NodeId, double> cost, tail;
    for (NodeId n : order) cost[n] = params.cost_ms ? params.cost_ms(dag.node(n)) : 0.0;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const NodeId n = *it;
      double t = 0;
      if (n != root)
        for (NodeId c : dag.Consumers(n))
          if (in_set.count(c)) t = std::max(t, cost[c] + tail[c]);
      tail[n] = t;
      DagNode& node = dag.node(n);
      const double lf = T - t;
      if (!node.latest_finish_ms || lf < *node.latest_finish_ms) node.latest_finish_ms = lf;
      node.latest_start_ms = *node.latest_finish_ms - cost[n];
      node.slack_ms = node.latest_start_ms - params.now_ms;
      node.priority = PriorityForSlack(node.slack_ms);
    }
    // Group members share the least slack of their group.
    std::map<int, double> group_slack;
    for (NodeId n : order) {
      const DagNode& node = dag.node(n);
      if (!node.group) continue;
      auto [it, fresh] = group_slack.emplace(node.group, node.slack_ms);
      if (!fresh) it->second = std::min(it->second, node.slack_ms);
    }
    for (NodeId n : order) {
      DagNode& node = dag.node(n);
      if (!node.group) continue;
      node.slack_ms = group_slack[node.group];
      node.priority = PriorityForSlack(node.slack_ms);
    }
  }
  return Status::Ok();
}

}  // namespace braid::rt
