#include "graph/dag.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <boost/graph/topological_sort.hpp>

namespace braid::rt {

// Vertex i is node i+1; an edge runs from a producer to a consumer.
struct Dag::Graph {
  using G = boost::adjacency_list<boost::setS, boost::vecS, boost::bidirectionalS>;
  G g;
};

Dag::Dag() : graph_(std::make_unique<Graph>()) {}
Dag::~Dag() = default;

VarId Dag::AddVar(std::string name, NodeId producer) {
  DagVar v;
  v.id = vars_.size() + 1;
  v.name = name.empty() ? "v" + std::to_string(v.id) : std::move(name);
  v.producer = producer;
  vars_.push_back(std::move(v));
  return vars_.back().id;
}

NodeId Dag::AddNode(DagNode node) {
  node.id = nodes_.size() + 1;
  boost::add_vertex(graph_->g);
  std::vector<VarId> inputs;
  for (VarId v : node.inputs)
    if (std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
  node.inputs = inputs;
  const NodeId id = node.id;
  nodes_.push_back(std::move(node));
  for (VarId v : inputs) {
    var(v).consumers.push_back(id);
    if (NodeId p = var(v).producer) boost::add_edge(p - 1, id - 1, graph_->g);
  }
  for (VarId v : nodes_.back().read_before) {
    var(v).readers.push_back(id);
    if (NodeId p = var(v).producer) boost::add_edge(p - 1, id - 1, graph_->g);
  }
  return id;
}

void Dag::AttachOutput(NodeId n, VarId v) {
  node(n).outputs.push_back(v);
  var(v).producer = n;
}

Status Dag::AddInput(NodeId n, VarId v) {
  if (!HasNode(n)) return Status::InvalidArgument("unknown node " + std::to_string(n));
  if (!HasVar(v)) return Status::InvalidArgument("unknown variable " + std::to_string(v));
  auto& nd = node(n);
  if (std::find(nd.inputs.begin(), nd.inputs.end(), v) != nd.inputs.end()) return Status::Ok();
  if (NodeId p = var(v).producer) {
    // A path n -> ... -> p plus the new edge p -> n would be a cycle. An
    // explicit stack, so that a long chain cannot exhaust the thread's.
    std::vector<NodeId> from(nodes_.size() + 1, 0);  // the walk's tree, to name the path
    std::vector<NodeId> stack{n};
    from[n] = n;
    bool found = p == n;
    while (!stack.empty() && !found) {
      const NodeId at = stack.back();
      stack.pop_back();
      for (NodeId c : Consumers(at)) {
        if (from[c]) continue;
        from[c] = at;
        if (c == p) {
          found = true;
          break;
        }
        stack.push_back(c);
      }
    }
    if (found) {
      std::vector<NodeId> path{p};
      for (NodeId x = p; x != n; x = from[x]) path.push_back(from[x]);
      std::reverse(path.begin(), path.end());
      std::string names;
      for (NodeId x : path) names += node(x).Name() + " -> ";
      names += nd.Name();
      return Status::InvalidArgument("dependency on '" + var(v).name + "' (variable " +
                                     std::to_string(v) + ") would make a cycle: " + names);
    }
    boost::add_edge(p - 1, n - 1, graph_->g);
  }
  nd.inputs.push_back(v);
  var(v).consumers.push_back(n);
  return Status::Ok();
}

std::vector<NodeId> Dag::Producers(NodeId n) const {
  std::vector<NodeId> out;
  for (const auto* list : {&node(n).inputs, &node(n).read_before})
    for (VarId v : *list) {
      NodeId p = var(v).producer;
      if (p && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
  return out;
}

std::vector<VarId> Dag::LatestOf(const std::vector<VarId>& vars) const {
  // One walk up from every variable's producer's producers: what it reaches
  // is strictly upstream of some variable of the set.
  std::vector<bool> upstream(nodes_.size() + 1);
  std::vector<NodeId> stack;
  for (VarId v : vars)
    if (HasVar(v) && var(v).producer)
      for (NodeId p : Producers(var(v).producer)) stack.push_back(p);
  while (!stack.empty()) {
    const NodeId at = stack.back();
    stack.pop_back();
    if (upstream[at]) continue;
    upstream[at] = true;
    for (NodeId p : Producers(at))
      if (!upstream[p]) stack.push_back(p);
  }
  std::vector<VarId> out;
  for (VarId v : vars) {
    if (!HasVar(v) || !var(v).producer || upstream[var(v).producer]) continue;
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

std::vector<NodeId> Dag::Consumers(NodeId n) const {
  std::vector<NodeId> out;
  for (auto [it, end] = boost::out_edges(n - 1, graph_->g); it != end; ++it)
    out.push_back(boost::target(*it, graph_->g) + 1);
  return out;
}

namespace {
// Records the first back edge and the DFS tree, to name a cycle.
struct CycleVisitor : boost::default_dfs_visitor {
  using G = boost::adjacency_list<boost::setS, boost::vecS, boost::bidirectionalS>;
  using Edge = boost::graph_traits<G>::edge_descriptor;
  std::vector<size_t>* parent;
  std::optional<std::pair<size_t, size_t>>* back;
  void tree_edge(Edge e, const G& g) const { (*parent)[boost::target(e, g)] = boost::source(e, g); }
  void back_edge(Edge e, const G& g) const {
    if (!*back) *back = std::make_pair(boost::source(e, g), boost::target(e, g));
  }
};
}  // namespace

std::optional<std::vector<NodeId>> Dag::FindCycle() const {
  const size_t n = boost::num_vertices(graph_->g);
  std::vector<size_t> parent(n, n);
  std::optional<std::pair<size_t, size_t>> back;
  CycleVisitor vis;
  vis.parent = &parent;
  vis.back = &back;
  std::vector<boost::default_color_type> colors(n);
  boost::depth_first_search(graph_->g,
                            boost::visitor(vis).color_map(boost::make_iterator_property_map(
                                colors.begin(), boost::get(boost::vertex_index, graph_->g))));
  if (!back) return std::nullopt;
  // back = (u, v): v is an ancestor of u in the DFS tree; the cycle is v .. u.
  std::vector<NodeId> cycle;
  for (size_t x = back->first; x != back->second && x < n; x = parent[x]) cycle.push_back(x + 1);
  cycle.push_back(back->second + 1);
  std::reverse(cycle.begin(), cycle.end());
  return cycle;
}

std::vector<NodeId> Dag::Downstream(NodeId n) const {
  // Depth-first post-order with an explicit stack (node, next consumer);
  // its reverse is a topological order.
  std::vector<bool> seen(nodes_.size() + 1);
  std::vector<NodeId> order;
  std::vector<std::pair<NodeId, std::vector<NodeId>>> stack;
  seen[n] = true;
  stack.emplace_back(n, Consumers(n));
  while (!stack.empty()) {
    auto& [at, next] = stack.back();
    if (next.empty()) {
      order.push_back(at);
      stack.pop_back();
      continue;
    }
    const NodeId c = next.back();
    next.pop_back();
    if (seen[c]) continue;
    seen[c] = true;
    stack.emplace_back(c, Consumers(c));
  }
  order.pop_back();  // n itself (finished last)
  std::reverse(order.begin(), order.end());
  return order;
}

}  // namespace braid::rt
