// Listing, showing and removing the runs of a run store (runtime.h).
#include <filesystem>

#include "exec/stored_scores.h"
#include "runtime/runtime.h"
#include "store/run_store.h"

namespace braid::rt {
namespace {

// Opens an existing store; NotFound (nothing created) when there is none.
Result<std::unique_ptr<RunStore>> OpenExisting(const std::string& db_path) {
  std::error_code ec;
  if (db_path.empty() || !std::filesystem::exists(db_path, ec))
    return Status::NotFound("no run store at '" + db_path + "'");
  return RunStore::Open(db_path);
}

}  // namespace

Result<RunRecord> StoredRunRecord(RunStore& store, const StoredRun& run) {
  BRAID_ASSIGN_OR_RETURN(RunTotals t, store.Totals(run.id));
  RunRecord r;
  r.id = run.id;
  r.program = run.program;
  r.owner = run.owner;
  r.args = run.args;
  r.state = run.status == "running" ? "interrupted" : run.status;
  r.error = run.error;
  r.started_unix = run.created_unix;
  r.finished_unix = t.finished_unix;
  r.paused_seconds = t.paused_seconds;
  r.attempts = run.attempts;
  r.nodes_done = t.nodes_done;
  r.nodes_failed = t.nodes_failed;
  r.prompt_tokens = t.prompt_tokens;
  r.cached_tokens = t.cached_tokens;
  r.generated_tokens = t.generated_tokens;
  return r;
}

Result<std::vector<RunRecord>> ListStoredRuns(const std::string& db_path, int limit) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<RunStore> store, OpenExisting(db_path));
  BRAID_ASSIGN_OR_RETURN(std::vector<StoredRun> runs, store->ListRuns(limit));
  std::vector<RunRecord> out;
  for (const StoredRun& run : runs) {
    BRAID_ASSIGN_OR_RETURN(RunRecord r, StoredRunRecord(*store, run));
    out.push_back(std::move(r));
  }
  return out;
}

Result<RunRecord> GetStoredRun(const std::string& db_path, const std::string& id,
                               std::vector<RunNodeRecord>* nodes) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<RunStore> store, OpenExisting(db_path));
  BRAID_ASSIGN_OR_RETURN(StoredRun run, store->GetRun(id));
  BRAID_ASSIGN_OR_RETURN(RunRecord r, StoredRunRecord(*store, run));
  if (nodes != nullptr) {
    BRAID_ASSIGN_OR_RETURN(std::vector<StoredCall> calls, store->Calls(id));
    nodes->clear();
    for (StoredCall& c : calls) {
      c.outputs.erase(std::string(kScoresKey));  // not an output: select scores, for replay
      nodes->push_back({std::move(c.function), std::move(c.outputs)});
    }
  }
  return r;
}

Status DeleteStoredRun(const std::string& db_path, const std::string& id) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<RunStore> store, OpenExisting(db_path));
  return store->DeleteRun(id);
}

}  // namespace braid::rt
