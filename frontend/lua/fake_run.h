// A fake rt::Run for driver tests: its "model" answers instantly and
// deterministically: output `o` of a call becomes "o[input1|input2|...]".
// It executes one level of wanted, ready nodes per WaitAny, so tests see that
// the DAG is built before anything runs and that goals reach the runtime
// through Want. A function named "fail" fails its outputs. A select output
// takes its first choice; choice i scores -(i + 1) / 4.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/runtime.h"

namespace braid::lua::testing {

using rt::VarId;
using rt::VarState;

class FakeRun final : public rt::Run {
 public:
  struct Node {
    enum Kind { kCall, kJoin } kind;
    std::string fn;
    std::vector<rt::Arg> inputs;  // in the function's input order
    std::vector<std::pair<std::string, VarId>> outputs;
    std::vector<std::vector<std::string>> choices;  // per output; empty unless select
    std::string sep;
    bool done = false;
  };
  struct Var {
    VarState state = VarState::kPending;
    std::string value, error;
    int producer = -1;
    std::vector<VarId> depends;  // host vars
    rt::ChoiceScores scores;     // select outputs
    bool wanted = false;
  };

  explicit FakeRun(std::map<std::string, std::string>* replay = nullptr)
      : replay_(replay ? replay : &own_) {}

  const std::string& id() const override { return id_; }
  Result<std::map<std::string, VarId>> Call(const rt::SemanticFunction& fn,
                                            const std::map<std::string, rt::Arg>& args,
                                            const rt::CallKey& key,
                                            const std::vector<VarId>& read_before = {}) override {
    // Host work the call costs the program's thread (copying, rendering).
    if (call_sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(call_sleep_ms));
    keys.push_back(key.path + "#" + std::to_string(key.index));
    reads.push_back(read_before);
    Node n{Node::kCall, fn.spec().name, {}, {}, {}, "", false};
    for (const std::string& in : fn.inputs()) n.inputs.push_back(args.at(in));
    std::map<std::string, VarId> outs;
    for (const rt::OutputSpec& o : fn.outputs()) {
      VarId v = NewVar();
      vars_[v].producer = static_cast<int>(nodes_.size());
      n.outputs.push_back({o.name, v});
      n.choices.push_back(o.choices);
      outs[o.name] = v;
    }
    nodes_.push_back(std::move(n));
    return outs;
  }
  VarId Literal(std::string value, std::string) override {
    VarId v = NewVar();
    vars_[v].state = VarState::kReady;
    vars_[v].value = std::move(value);
    return v;
  }
  Result<VarId> Join(const std::vector<rt::Arg>& parts, std::string sep) override {
    VarId v = NewVar();
    vars_[v].producer = static_cast<int>(nodes_.size());
    nodes_.push_back(Node{Node::kJoin, "join", parts, {{"out", v}}, {{}}, std::move(sep), false});
    return v;
  }
  VarId HostVar(std::string, const std::vector<VarId>& depends_on, std::string) override {
    VarId v = NewVar();
    vars_[v].depends = depends_on;
    return v;
  }
  Status SetValue(VarId var, std::string value) override {
    vars_[var].state = VarState::kReady;
    vars_[var].value = std::move(value);
    return Status::Ok();
  }
  Status SetFailed(VarId var, std::string error) override {
    vars_[var].state = VarState::kFailed;
    vars_[var].error = std::move(error);
    return Status::Ok();
  }
  Status Want(VarId var, const rt::GetOptions& options) override {
    if (!vars_.count(var)) return Status::NotFound("no such variable");
    wants.push_back({var, options});
    MarkWanted(var);
    return Status::Ok();
  }
  VarState state(VarId var) const override { return vars_.at(var).state; }
  // Only wanted calls and joins run here (see WaitAny).
  bool AnySettles(const std::vector<VarId>& vars) const override {
    for (VarId v : vars) {
      const Var& var = vars_.at(v);
      if (var.state != VarState::kPending || (var.producer >= 0 && var.wanted)) return true;
    }
    return false;
  }
  std::string value(VarId var) const override { return vars_.at(var).value; }
  std::string error(VarId var) const override { return vars_.at(var).error; }
  Result<rt::ChoiceScores> scores(VarId var) const override {
    const Var& v = vars_.at(var);
    const bool select = v.producer >= 0 && [&] {
      const Node& n = nodes_[static_cast<size_t>(v.producer)];
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (n.outputs[i].second == var) return !n.choices[i].empty();
      return false;
    }();
    if (!select) return Status::InvalidArgument("not a select output");
    if (v.state != VarState::kReady) return Status::NotFound("not ready");
    return v.scores;
  }
  void WaitAny(const std::vector<VarId>& vars, int timeout_ms) override {
    ++wait_calls;
    if (calls_before_first_wait < 0) calls_before_first_wait = static_cast<int>(keys.size());
    if (wait_sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(wait_sleep_ms));
    // One level of execution: every wanted node whose inputs are ready.
    std::vector<size_t> ready;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      Node& n = nodes_[i];
      if (n.done || !vars_[n.outputs[0].second].wanted) continue;
      bool ok = true;
      for (const rt::Arg& a : n.inputs)
        ok = ok && (!a.var || vars_[a.var].state == VarState::kReady);
      if (ok) ready.push_back(i);
    }
    for (size_t i : ready) Execute(nodes_[i]);
  }
  std::string Replayable(const std::string& key, const std::string& value, Durability) override {
    auto it = replay_->find(key);
    if (it != replay_->end()) return it->second;
    (*replay_)[key] = value;
    return value;
  }
  std::vector<rt::NodeInfo> Nodes() const override { return {}; }
  std::vector<rt::VarInfo> Vars() const override { return {}; }
  std::string ToDot() const override { return ""; }
  void Cancel() override {}
  void Finish(const Status&) override {}

  std::vector<std::string> keys;
  std::vector<std::vector<VarId>> reads;  // read_before of each call
  std::vector<std::pair<VarId, rt::GetOptions>> wants;
  int wait_calls = 0;
  int calls_before_first_wait = -1;
  int wait_sleep_ms = 0;  // each WaitAny sleeps this long (the model)
  int call_sleep_ms = 0;  // each Call sleeps this long (host work)

 private:
  VarId NewVar() {
    VarId v = next_++;
    vars_[v];
    return v;
  }
  void MarkWanted(VarId v) {
    Var& var = vars_[v];
    if (var.wanted) return;
    var.wanted = true;
    for (VarId d : var.depends) MarkWanted(d);
    if (var.producer >= 0) {
      Node& n = nodes_[var.producer];
      for (auto& [name, out] : n.outputs) vars_[out].wanted = true;
      for (const rt::Arg& a : n.inputs)
        if (a.var) MarkWanted(a.var);
    }
  }
  std::string ArgText(const rt::Arg& a) { return a.var ? vars_[a.var].value : a.text; }
  void Execute(Node& n) {
    n.done = true;
    if (n.kind == Node::kJoin) {
      std::string s;
      for (size_t i = 0; i < n.inputs.size(); ++i) s += (i ? n.sep : "") + ArgText(n.inputs[i]);
      (void)SetValue(n.outputs[0].second, s);
      return;
    }
    std::string ins;
    for (size_t i = 0; i < n.inputs.size(); ++i) ins += (i ? "|" : "") + ArgText(n.inputs[i]);
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const auto& [name, v] = n.outputs[i];
      const std::vector<std::string>& choices = n.choices[i];
      if (n.fn == "fail") {
        (void)SetFailed(v, "boom from the engine");
      } else if (!choices.empty()) {
        for (size_t c = 0; c < choices.size(); ++c)
          vars_[v].scores.emplace_back(choices[c], -0.25 * static_cast<double>(c + 1));
        (void)SetValue(v, choices[0]);
      } else {
        (void)SetValue(v, name + "[" + ins + "]");
      }
    }
  }

  std::string id_ = "run-test";
  std::map<VarId, Var> vars_;
  std::vector<Node> nodes_;
  VarId next_ = 1;
  std::map<std::string, std::string> own_;
  std::map<std::string, std::string>* replay_;
};

}  // namespace braid::lua::testing
