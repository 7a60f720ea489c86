// Where a run's events go: the program's watcher (Run::Watch), and the run
// store's event log when the runtime has a store.
//
// Shared (shared_ptr) by the run, its executor and the engine callbacks of
// its requests, which emit token deltas from engine threads; every method is
// thread-safe (the watcher under its own mutex, the store under its own).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "graph/dag.h"

namespace braid::rt {

class RunStore;

class RunEvents {
 public:
  // `store` may be null (the run is not persisted).
  RunEvents(std::shared_ptr<RunStore> store, std::string run_id)
      : store_(std::move(store)), run_id_(std::move(run_id)) {}

  // Replaces the watcher (null: none).
  void Watch(RunWatcher watcher);
  // To the watcher only (token deltas).
  void Emit(const RunEvent& e);
  // A node's event: node_started, node_finished and node_failed reach the
  // watcher and the store; node_moved (a node moved off an engine that
  // died, which runs on elsewhere) only the store. The store's record is
  // JSON with the node, its label, engine, tokens, times, deadline and
  // `detail` when not empty.
  void Node(const std::string& kind, const DagNode& n, const std::string& detail = "");
  // A host variable was set (the store only).
  void HostValue(VarId var);

 private:
  const std::shared_ptr<RunStore> store_;
  const std::string run_id_;
  std::mutex mu_;
  RunWatcher watcher_;
};

}  // namespace braid::rt
