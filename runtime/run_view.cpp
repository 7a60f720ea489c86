// A Run's views (any thread): node and variable snapshots, what will still
// settle by itself, and the DAG as Graphviz text.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "run_impl.h"

namespace braid::rt {
namespace {

std::string DotEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
const char* DotColor(NodeState s) {
  switch (s) {
    case NodeState::kWaiting:
    case NodeState::kReady:
      return "lightgrey";
    case NodeState::kRunning:
      return "yellow";
    case NodeState::kDone:
      return "palegreen";
    case NodeState::kFailed:
      return "tomato";
    case NodeState::kCancelled:
      return "white";
  }
  return "white";
}
// At most `max` bytes of `s` (cut at a UTF-8 boundary), "..." when cut.
std::string Truncate(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

}  // namespace

bool RunImpl::SettlesLocked(VarId id, std::vector<uint8_t>& memo) const {
  if (!dag_.HasVar(id)) return true;  // reads as failed
  const DagVar& v = dag_.var(id);
  if (v.state != VarState::kPending) return true;
  if (!v.producer) return false;
  uint8_t& m = memo[v.producer];
  if (m == 1 || m == 2) return m == 1;
  if (m == 3) return false;  // a cycle cannot settle
  m = 3;
  const DagNode& n = dag_.node(v.producer);
  bool ok = n.state == NodeState::kRunning || n.state == NodeState::kReady;
  if (!ok && n.Runnable()) {
    ok = true;
    for (VarId in : n.inputs) ok = ok && SettlesLocked(in, memo);
  }
  memo[v.producer] = ok ? 1 : 2;
  return ok;
}

bool RunImpl::AnySettles(const std::vector<VarId>& vars) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint8_t> memo(dag_.num_nodes() + 1);
  for (VarId v : vars)
    if (SettlesLocked(v, memo)) return true;
  return false;
}

std::vector<NodeInfo> RunImpl::Outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint8_t> memo(dag_.num_nodes() + 1);
  std::vector<NodeInfo> out;
  for (size_t i = 1; i <= dag_.num_nodes(); ++i) {
    const DagNode& n = dag_.node(i);
    if (n.Finished() || n.outputs.empty() || n.kind == DagNode::Kind::kHost) continue;
    if (SettlesLocked(n.outputs[0], memo)) out.push_back(InfoLocked(n));
  }
  return out;
}

NodeInfo RunImpl::InfoLocked(const DagNode& n) const {
  NodeInfo info;
  info.id = n.id;
  info.label = n.label;
  info.call = n.kind == DagNode::Kind::kCall;
  info.state = n.state;
  info.inputs = n.inputs;
  info.outputs = n.outputs;
  info.wanted = n.wanted;
  info.goal = n.goal;
  info.group = n.group;
  info.slack_ms = n.slack_ms;
  info.priority = n.priority;
  info.deadline_ms = n.latest_finish_ms;
  if (n.latest_finish_ms && n.state == NodeState::kDone && n.end_ms >= 0)
    info.deadline_met = n.end_ms <= *n.latest_finish_ms;
  else if (n.latest_finish_ms && n.state == NodeState::kFailed)
    info.deadline_met = false;
  info.read_before = n.read_before;
  info.start_ms = n.start_ms;
  info.end_ms = n.end_ms;
  info.engine = n.engine;
  info.prompt_tokens = n.prompt_tokens;
  info.cached_tokens = n.cached_tokens;
  info.host_tokens = n.host_tokens;
  info.generated_tokens = n.generated_tokens;
  info.queued_ms = n.queued_ms;
  info.run_ms = n.run_ms;
  if (n.state == NodeState::kRunning) {
    // Live figures: tokens streamed by its requests in flight, time since it started.
    const LiveFigures live = executor_.Live(n.id);
    info.generated_tokens += live.generated_tokens;
    if (live.run_ms) info.run_ms = *live.run_ms;
  }
  info.first_token_ms = n.first_token_ms;
  if (n.kind == DagNode::Kind::kCall) {
    info.scored = true;
    for (const auto& o : n.fn->outputs())
      info.scored = info.scored && o.kind == OutputSpec::Kind::kSelect;
  }
  if (n.first_token_ms >= 0 && info.generated_tokens > 1) {
    const double until = n.end_ms >= 0 ? n.end_ms : NowMs();
    if (until > n.first_token_ms)
      info.decode_tokens_per_s = (info.generated_tokens - 1) * 1000.0 / (until - n.first_token_ms);
  }
  info.error = n.error;
  info.warning = n.warning;
  return info;
}

std::vector<NodeInfo> RunImpl::Nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NodeInfo> out;
  for (size_t i = 1; i <= dag_.num_nodes(); ++i) out.push_back(InfoLocked(dag_.node(i)));
  return out;
}

std::vector<VarInfo> RunImpl::Vars() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<VarInfo> out;
  for (size_t i = 1; i <= dag_.num_vars(); ++i) {
    const DagVar& v = dag_.var(i);
    VarInfo info;
    info.id = v.id;
    info.name = v.name;
    info.state = v.state;
    // Per the contract, host-set variables report no producer.
    info.producer =
        v.producer && dag_.node(v.producer).kind != DagNode::Kind::kHost ? v.producer : 0;
    info.consumers = v.consumers;
    info.readers = v.readers;
    if (v.state == VarState::kReady)
      info.value = v.value;
    else
      info.error = v.error;
    info.scores = v.scores;  // set only once ready
    out.push_back(std::move(info));
  }
  return out;
}

// "TB" when the DAG is deeper than it is wide, else "LR". Depth: the nodes
// on its longest path; width: the most nodes at one depth. A node box is
// several times wider than tall, so a chain drawn left to right runs far
// off a screen while top to bottom it fits, and a wide fan-in the other way.
std::string RunImpl::RankDirLocked() const {
  const size_t n = dag_.num_nodes();
  // Each node's successors (inputs and read-before edges), and how many
  // predecessors are not placed yet (Kahn's order).
  std::vector<std::vector<NodeId>> next(n + 1);
  std::vector<int> preds(n + 1, 0);
  for (size_t i = 1; i <= dag_.num_vars(); ++i) {
    const DagVar& v = dag_.var(i);
    if (!v.producer) continue;
    for (const auto* list : {&v.consumers, &v.readers})
      for (NodeId c : *list) {
        next[v.producer].push_back(c);
        ++preds[c];
      }
  }
  std::vector<int> level(n + 1, 0);  // 0-based depth of each node
  std::vector<NodeId> ready;
  for (NodeId id = 1; id <= n; ++id)
    if (preds[id] == 0) ready.push_back(id);
  int depth = 0;
  while (!ready.empty()) {
    const NodeId id = ready.back();
    ready.pop_back();
    depth = std::max(depth, level[id] + 1);
    for (NodeId c : next[id]) {
      level[c] = std::max(level[c], level[id] + 1);
      if (--preds[c] == 0) ready.push_back(c);
    }
  }
  std::vector<int> at_level(static_cast<size_t>(depth) + 1, 0);
  int width = 0;
  for (NodeId id = 1; id <= n; ++id) width = std::max(width, ++at_level[level[id]]);
  return depth > width ? "TB" : "LR";
}

std::string RunImpl::ToDot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  o << "digraph \"" << DotEscape(id_) << "\" {\n  rankdir=" << RankDirLocked()
    << ";\n  node [shape=box, style=filled, fontname=\"Helvetica\"];\n";
  char buf[96];
  for (size_t i = 1; i <= dag_.num_nodes(); ++i) {
    const DagNode& n = dag_.node(i);
    std::ostringstream label;
    label << n.Name() << "\n" << NodeStateName(n.state);
    if (n.wanted) label << (n.goal == Criteria::kLatency ? ", latency" : ", throughput");
    if (n.group) label << ", group " << n.group;
    if (n.kind == DagNode::Kind::kCall && (n.prompt_tokens || n.generated_tokens))
      label << "\n"
            << n.prompt_tokens << " in (" << n.cached_tokens << " cached), " << n.generated_tokens
            << " out";
    if (n.start_ms >= 0) {
      std::snprintf(buf, sizeof buf, "\n%.0f-%s ms", n.start_ms,
                    n.end_ms >= 0 ? std::to_string(static_cast<long>(n.end_ms)).c_str() : "");
      label << buf << (n.engine.empty() ? "" : " on " + n.engine);
    }
    if (n.latest_finish_ms) {
      const bool done = n.state == NodeState::kDone && n.end_ms >= 0;
      std::snprintf(buf, sizeof buf, "\ndeadline %.0f ms%s", *n.latest_finish_ms,
                    !done                             ? ""
                    : n.end_ms <= *n.latest_finish_ms ? ", met"
                                                      : ", MISSED");
      label << buf;
    }
    if (n.state == NodeState::kDone && n.kind == DagNode::Kind::kCall)
      for (VarId v : n.outputs) {
        const DagVar& var = dag_.var(v);
        label << "\n" << var.name << " = " << Truncate(var.value, 40);
        for (size_t k = 0; k < var.scores.size(); ++k) {  // select: every choice's score
          std::snprintf(buf, sizeof buf, "%s%s %.2f", k ? ", " : " (",
                        Truncate(var.scores[k].first, 24).c_str(), var.scores[k].second);
          label << buf << (k + 1 == var.scores.size() ? ")" : "");
        }
      }
    if (n.state == NodeState::kFailed) label << "\n" << Truncate(n.error, 60);
    o << "  n" << n.id << " [label=\"" << DotEscape(label.str())
      << "\", fillcolor=" << DotColor(n.state) << (n.wanted ? "" : ", style=\"filled,dashed\"")
      << "];\n";
  }
  // Inputs as solid edges; values the program read before a call as dashed ones.
  for (size_t i = 1; i <= dag_.num_vars(); ++i) {
    const DagVar& v = dag_.var(i);
    if (!v.producer) continue;
    for (NodeId c : v.consumers)
      o << "  n" << v.producer << " -> n" << c << " [label=\"" << DotEscape(v.name) << "\"];\n";
    for (NodeId r : v.readers)
      o << "  n" << v.producer << " -> n" << r << " [style=dashed, label=\"read "
        << DotEscape(v.name) << "\"];\n";
  }
  o << "}\n";
  return o.str();
}

}  // namespace braid::rt
