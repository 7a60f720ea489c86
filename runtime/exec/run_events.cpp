#include "exec/run_events.h"

#include <nlohmann/json.hpp>

#include "store/run_store.h"

namespace braid::rt {

void RunEvents::Watch(RunWatcher watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  watcher_ = std::move(watcher);
}

void RunEvents::Emit(const RunEvent& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (watcher_) watcher_(e);
}

void RunEvents::Node(const std::string& kind, const DagNode& n, const std::string& detail) {
  if (kind == "node_started" || kind == "node_finished" || kind == "node_failed") {
    const RunEvent::Kind k = kind == "node_started"    ? RunEvent::Kind::kNodeStarted
                             : kind == "node_finished" ? RunEvent::Kind::kNodeFinished
                                                       : RunEvent::Kind::kNodeFailed;
    Emit({k, n.id, 0, detail, n.label, n.start_ms, n.end_ms});
  }
  if (!store_) return;
  nlohmann::json j = {{"node", n.id},
                      {"label", n.label},
                      {"engine", n.engine},
                      {"prompt_tokens", n.prompt_tokens},
                      {"cached_tokens", n.cached_tokens},
                      {"generated_tokens", n.generated_tokens},
                      {"run_ms", n.run_ms},
                      {"start_ms", n.start_ms},
                      {"end_ms", n.end_ms}};
  if (n.latest_finish_ms) {
    j["deadline_ms"] = *n.latest_finish_ms;
    j["slack_ms"] = n.slack_ms;
    if (n.state == NodeState::kDone) j["deadline_met"] = n.end_ms <= *n.latest_finish_ms;
  }
  if (!n.read_before.empty()) j["read_before"] = n.read_before;
  if (!detail.empty()) j["detail"] = detail;
  (void)store_->AppendEvent(run_id_, kind, j.dump());
}

void RunEvents::HostValue(VarId var) {
  if (store_) (void)store_->AppendEvent(run_id_, "host_value", nlohmann::json{{"var", var}}.dump());
}

}  // namespace braid::rt
