// The DAG of one run: nodes (calls, joins, host nodes) and the semantic
// variables between them. Variables are the edges' payload; the graph itself
// (a Boost.Graph adjacency_list, kept inside dag.cpp) has an edge from a
// producer node to each consumer node of one of its outputs.
//
// Plain data plus structural queries; no locking (the Run guards it) and no
// execution. NodeId and VarId count from 1; 0 means "none".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace braid::rt {

// One node: what it computes, its deduced goal, and how its execution went.
struct DagNode {
  enum class Kind { kCall, kJoin, kHost };
  NodeId id = 0;
  Kind kind = Kind::kCall;
  std::string label;          // function name, "join", "host"
  std::vector<VarId> inputs;  // distinct, in order of first use
  std::vector<VarId> outputs;
  // Ready values the program read before it made this call (see Run::Call):
  // graph edges like inputs, but never waited for.
  std::vector<VarId> read_before;
  NodeState state = NodeState::kWaiting;

  // kCall: the function, its bound arguments and its resume key.
  std::shared_ptr<const SemanticFunction> fn;
  std::map<std::string, Arg> args;
  CallKey key;
  // kJoin
  std::vector<Arg> parts;
  std::string sep;

  // Deduced at Want (see deduction.h).
  bool wanted = false;
  bool goal_set = false;
  Criteria goal = Criteria::kThroughput;
  int group = 0;
  std::optional<double> latest_finish_ms;  // absolute, on the run's clock
  double latest_start_ms = 0;
  double slack_ms = 0;
  int priority = 0;

  // Execution record.
  std::string engine;
  int prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  int host_tokens = 0;  // of the prompt, copied back from the host KV tier
  double queued_ms = 0, run_ms = 0;
  double start_ms = -1, end_ms = -1;  // run clock; -1 = not yet
  double first_token_ms = -1;
  std::string error;
  std::string warning;  // a finished call whose output looks like a mistake (NodeInfo::warning)

  // "summarize#3": the name used in errors and events.
  std::string Name() const { return label + "#" + std::to_string(id); }
  bool Finished() const {
    return state == NodeState::kDone || state == NodeState::kFailed ||
           state == NodeState::kCancelled;
  }
  // Whether it runs once its inputs are ready: eager calls and joins do,
  // lazy calls only once wanted, host nodes never (the program sets them).
  bool Runnable() const {
    switch (kind) {
      case Kind::kHost:
        return false;
      case Kind::kJoin:
        return true;  // cheap, and eager calls may consume it
      case Kind::kCall:
        return wanted || !fn->spec().lazy;
    }
    return false;
  }
};

struct DagVar {
  VarId id = 0;
  std::string name;
  VarState state = VarState::kPending;
  NodeId producer = 0;
  std::vector<NodeId> consumers;
  std::vector<NodeId> readers;  // nodes with a read-before edge from this variable
  std::string value;
  std::string error;
  int token_estimate = -1;  // cached token count of a ready value (-1 = not yet)
  ChoiceScores scores;      // a ready select output: every choice's score
};

class Dag {
 public:
  Dag();
  ~Dag();
  Dag(const Dag&) = delete;
  Dag& operator=(const Dag&) = delete;

  // A new variable; `producer` 0 for literals and host-set variables.
  VarId AddVar(std::string name, NodeId producer);
  // A new node consuming `inputs` and reading `read_before` (which must all
  // exist; see HasVar); its outputs are added afterwards with AddVar(name,
  // id) and AttachOutput.
  NodeId AddNode(DagNode node);
  void AttachOutput(NodeId node, VarId var);
  // Adds `var` as a further input of `node`. Errors: unknown ids, or the edge
  // would close a cycle (the message names the nodes on it).
  Status AddInput(NodeId node, VarId var);

  bool HasVar(VarId v) const { return v >= 1 && v <= vars_.size(); }
  bool HasNode(NodeId n) const { return n >= 1 && n <= nodes_.size(); }
  DagVar& var(VarId v) { return vars_[v - 1]; }
  const DagVar& var(VarId v) const { return vars_[v - 1]; }
  DagNode& node(NodeId n) { return nodes_[n - 1]; }
  const DagNode& node(NodeId n) const { return nodes_[n - 1]; }
  size_t num_nodes() const { return nodes_.size(); }
  size_t num_vars() const { return vars_.size(); }

  // Of `vars`, those that are not strictly upstream of another of them,
  // dropping literals and duplicates (order kept).
  std::vector<VarId> LatestOf(const std::vector<VarId>& vars) const;
  // Distinct nodes producing `n`'s inputs and read-before values, in order.
  std::vector<NodeId> Producers(NodeId n) const;
  // Distinct nodes consuming `n`'s outputs.
  std::vector<NodeId> Consumers(NodeId n) const;
  // A cycle through the graph if there is one: its nodes in order.
  std::optional<std::vector<NodeId>> FindCycle() const;
  // Every node downstream of `n` (not `n` itself), in topological order.
  std::vector<NodeId> Downstream(NodeId n) const;

 private:
  struct Graph;
  std::unique_ptr<Graph> graph_;
  std::vector<DagNode> nodes_;
  std::vector<DagVar> vars_;
};

// The value of an argument: its variable's (ready) value, or its text.
inline const std::string& ArgValue(const Dag& dag, const Arg& a) {
  return a.var ? dag.var(a.var).value : a.text;
}

}  // namespace braid::rt
