// Durable records of runs in SQLite (WAL mode): runs, their calls (nodes)
// with the values they produced, host-recorded values, and an event log.
// A value is written (and the transaction committed) before the runtime
// reports it ready, so an acknowledged value survives kill -9.
//
// Thread-safe: one connection guarded by a mutex; writes use BEGIN IMMEDIATE.
// SQLite types never appear outside store/ (pimpl).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/status.h"

namespace braid::rt {

struct StoredRun {
  std::string id;
  std::string program;
  std::vector<std::string> args;
  std::string status;  // "running", "done", "failed"
  std::string error;
  double created_unix = 0;
  // A digest of the program's source (rt::ProgramHash) when the run was
  // created; empty for runs recorded before schema version 2.
  std::string program_hash;
  // The client the run belongs to (an API key's name on braid serve); empty
  // for runs with no client: those of braid run, of a server without keys,
  // and runs recorded before schema version 3. (Initialized, so that brace
  // lists written before it existed stay complete.)
  std::string owner = {};
  // How many times a server started executing the run since it last
  // recorded a call (AddAttempt; RecordCall sets it back to 0): attempts
  // without progress. 0 for runs of braid run and runs recorded before
  // schema version 4.
  int attempts = 0;
};

// A run's totals from its record and event log, for listings.
struct RunTotals {
  double finished_unix = 0;  // 0: not finished
  int nodes_done = 0, nodes_failed = 0;
  int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  // Time between processes: for each resume, from the run's last event
  // before it to the resume (a killed or stopped run waiting to be resumed).
  double paused_seconds = 0;
};

// A finished call, found again on resume by its key.
struct StoredCall {
  std::string key;  // "path#index#function#input-hash"
  std::string function;
  std::map<std::string, std::string> outputs;  // output name -> value
};

struct RunRecord;
class RunStore;
// The run's summary as braid runs shows it; "running" reads "interrupted"
// (stored_runs.cpp).
Result<RunRecord> StoredRunRecord(RunStore& store, const StoredRun& run);

class RunStore {
 public:
  // Opens or creates the database at `path` (":memory:" for tests), applying
  // the schema migrations. Errors name the path and SQLite's message.
  static Result<std::unique_ptr<RunStore>> Open(const std::string& path);
  virtual ~RunStore() = default;

  virtual Status CreateRun(const StoredRun& run) = 0;
  virtual Result<StoredRun> GetRun(const std::string& id) = 0;     // NotFound if unknown
  virtual Result<std::vector<StoredRun>> ListRuns(int limit) = 0;  // newest first
  // The runs whose owner is `owner`, newest first, at most `limit` (<= 0:
  // all). The default filters ListRuns(0); a store that can select by owner
  // overrides it.
  virtual Result<std::vector<StoredRun>> ListRunsOf(const std::string& owner, int limit) {
    BRAID_ASSIGN_OR_RETURN(std::vector<StoredRun> all, ListRuns(0));
    std::vector<StoredRun> out;
    for (StoredRun& run : all) {
      if (limit > 0 && static_cast<int>(out.size()) >= limit) break;
      if (run.owner == owner) out.push_back(std::move(run));
    }
    return out;
  }
  virtual Status FinishRun(const std::string& id, const std::string& status,
                           const std::string& error) = 0;
  // Counts one more attempt at the run (StoredRun::attempts) and returns
  // the count, this one included; durable on return. NotFound if unknown.
  virtual Result<int> AddAttempt(const std::string& id) = 0;
  virtual Result<RunTotals> Totals(const std::string& id) = 0;  // NotFound if unknown
  // Removes the run with its calls, values and events; NotFound if unknown.
  virtual Status DeleteRun(const std::string& id) = 0;

  // Records a finished call's outputs in one transaction (durable on
  // return), and sets the run's attempts back to 0.
  virtual Status RecordCall(const std::string& run_id, const StoredCall& call) = 0;
  virtual Result<std::optional<StoredCall>> FindCall(const std::string& run_id,
                                                     const std::string& key) = 0;
  virtual Result<std::vector<StoredCall>> Calls(const std::string& run_id) = 0;

  // Host values (os.time, random numbers) recorded for replay. The same
  // value again under a key is fine, a different one is InvalidArgument.
  // RecordValue is durable on return. BufferValue is cheaper: the value is
  // written at the latest with the run's next call, end or RecordValue,
  // when the run has kValueBatch values waiting, or when the store closes;
  // so whatever the store holds of a run, it holds the values the run read
  // before it. A store that does not batch records at once.
  static constexpr size_t kValueBatch = 512;
  virtual Status RecordValue(const std::string& run_id, const std::string& key,
                             const std::string& value) = 0;
  virtual Status BufferValue(const std::string& run_id, const std::string& key,
                             const std::string& value) {
    return RecordValue(run_id, key, value);
  }
  virtual Result<std::optional<std::string>> FindValue(const std::string& run_id,
                                                       const std::string& key) = 0;

  // Append-only event log (node started/finished/failed, run started/resumed).
  virtual Status AppendEvent(const std::string& run_id, const std::string& kind,
                             const std::string& data) = 0;
};

}  // namespace braid::rt
