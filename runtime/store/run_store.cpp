// RunStore over one SQLite connection guarded by a mutex.
//
// Every public method takes the mutex for its whole duration, so statements
// from different threads never interleave on the connection. Writes run in a
// BEGIN IMMEDIATE transaction that is committed before the method returns;
// with journal_mode=WAL and synchronous=FULL the commit fsyncs the WAL, so a
// returned Ok means the data is on disk; BufferValue alone keeps its values
// in memory, to be written in the transaction of the run's next write.
// Reads that issue several SELECTs run in one deferred transaction so they
// see one snapshot even while another process writes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "run_store_schema.h"
#include "sqlite_db.h"
#include "sqlite_run_store.h"

namespace braid::rt {
namespace {

double SystemClock() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

bool IsValidStatus(const std::string& status) {
  return status == "running" || status == "done" || status == "failed" || status == "cancelled";
}

class SqliteRunStore final : public RunStore {
 public:
  SqliteRunStore(std::unique_ptr<SqliteDb> db, std::function<double()> clock)
      : db_(std::move(db)), clock_(std::move(clock)) {}
  ~SqliteRunStore() override;

  Status CreateRun(const StoredRun& run) override;
  Result<StoredRun> GetRun(const std::string& id) override;
  Result<std::vector<StoredRun>> ListRuns(int limit) override;
  Result<std::vector<StoredRun>> ListRunsOf(const std::string& owner, int limit) override;
  Status FinishRun(const std::string& id, const std::string& status,
                   const std::string& error) override;
  Result<int> AddAttempt(const std::string& id) override;
  Result<RunTotals> Totals(const std::string& id) override;
  Status DeleteRun(const std::string& id) override;
  Status RecordCall(const std::string& run_id, const StoredCall& call) override;
  Result<std::optional<StoredCall>> FindCall(const std::string& run_id,
                                             const std::string& key) override;
  Result<std::vector<StoredCall>> Calls(const std::string& run_id) override;
  Status RecordValue(const std::string& run_id, const std::string& key,
                     const std::string& value) override;
  Status BufferValue(const std::string& run_id, const std::string& key,
                     const std::string& value) override;
  Result<std::optional<std::string>> FindValue(const std::string& run_id,
                                               const std::string& key) override;
  Status AppendEvent(const std::string& run_id, const std::string& kind,
                     const std::string& data) override;

 private:
  // All helpers below expect mutex_ held.
  Status RequireRun(const std::string& run_id);
  Result<std::vector<std::string>> LoadArgs(const std::string& run_id);
  Result<std::optional<StoredCall>> LoadCall(const std::string& run_id, const std::string& key);
  Result<std::optional<std::string>> LoadValue(const std::string& run_id, const std::string& key);
  // The value under `key`, buffered or written (nullopt: none); refuses a
  // different value than `value` (the rule of RecordValue).
  Result<std::optional<std::string>> CheckValue(const std::string& run_id, const std::string& key,
                                                const std::string& value);
  // Writes the run's buffered values in the open write transaction; they
  // leave the buffer once it commits (Written).
  Status WriteBuffered(const std::string& run_id);
  // The value buffered under `key` (nullopt: none).
  std::optional<std::string> BufferedValue(const std::string& run_id, const std::string& key) const;
  void Written(const std::string& run_id) { buffered_.erase(run_id); }
  // ListRuns and ListRunsOf: every run, or those of one owner.
  Result<std::vector<StoredRun>> List(const std::string* owner, int limit);
  Status InvalidArgument(const std::string& message) const {
    return Status::InvalidArgument(db_->path() + ": " + message);
  }

  std::mutex mutex_;
  std::unique_ptr<SqliteDb> db_;  // guarded by mutex_
  std::function<double()> clock_;
  // BufferValue's values not written yet, by run and key (guarded by mutex_).
  struct Buffered {
    std::string value;
    double recorded_unix = 0;
  };
  std::map<std::string, std::map<std::string, Buffered>> buffered_;
};

SqliteRunStore::~SqliteRunStore() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!buffered_.empty()) {
    const std::string run_id = buffered_.begin()->first;
    SqliteTxn txn(db_.get(), SqliteTxn::Mode::kWrite);
    Status s = txn.Begin();
    if (s.ok()) s = WriteBuffered(run_id);
    if (s.ok()) s = txn.Commit();
    if (!s.ok())
      std::fprintf(stderr, "braid: run store: the values of run %s were not written: %s\n",
                   run_id.c_str(), s.message().c_str());
    Written(run_id);
  }
}

Status SqliteRunStore::RequireRun(const std::string& run_id) {
  BRAID_ASSIGN_OR_RETURN(SqliteStmt stmt, db_->Prepare("SELECT 1 FROM runs WHERE id = ?1"));
  BRAID_RETURN_IF_ERROR(stmt.BindText(1, run_id));
  BRAID_ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return Status::NotFound(db_->path() + ": run '" + run_id + "' not found");
  return Status::Ok();
}

Result<std::vector<std::string>> SqliteRunStore::LoadArgs(const std::string& run_id) {
  BRAID_ASSIGN_OR_RETURN(SqliteStmt stmt,
                         db_->Prepare("SELECT value FROM run_args WHERE run_id = ?1 ORDER BY idx"));
  BRAID_RETURN_IF_ERROR(stmt.BindText(1, run_id));
  std::vector<std::string> args;
  while (true) {
    BRAID_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    args.push_back(stmt.ColumnText(0));
  }
  return args;
}

Result<std::optional<StoredCall>> SqliteRunStore::LoadCall(const std::string& run_id,
                                                           const std::string& key) {
  StoredCall call;
  {
    BRAID_ASSIGN_OR_RETURN(
        SqliteStmt stmt, db_->Prepare("SELECT function FROM calls WHERE run_id = ?1 AND key = ?2"));
    BRAID_RETURN_IF_ERROR(stmt.BindText(1, run_id));
    BRAID_RETURN_IF_ERROR(stmt.BindText(2, key));
    BRAID_ASSIGN_OR_RETURN(bool found, stmt.Step());
    if (!found) return std::optional<StoredCall>();
    call.key = key;
    call.function = stmt.ColumnText(0);
  }
  BRAID_ASSIGN_OR_RETURN(
      SqliteStmt stmt,
      db_->Prepare("SELECT name, value FROM call_outputs WHERE run_id = ?1 AND key = ?2"));
  BRAID_RETURN_IF_ERROR(stmt.BindText(1, run_id));
  BRAID_RETURN_IF_ERROR(stmt.BindText(2, key));
  while (true) {
    BRAID_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    call.outputs.emplace(stmt.ColumnText(0), stmt.ColumnText(1));
  }
  return std::optional<StoredCall>(std::move(call));
}

Result<std::optional<std::string>> SqliteRunStore::LoadValue(const std::string& run_id,
                                                             const std::string& key) {
  BRAID_ASSIGN_OR_RETURN(
      SqliteStmt stmt,
      db_->Prepare("SELECT value FROM host_values WHERE run_id = ?1 AND key = ?2"));
  BRAID_RETURN_IF_ERROR(stmt.BindText(1, run_id));
  BRAID_RETURN_IF_ERROR(stmt.BindText(2, key));
  BRAID_ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return std::optional<std::string>();
  return std::optional<std::string>(stmt.ColumnText(0));
}

// ---- runs ----

Status SqliteRunStore::CreateRun(const StoredRun& run) {
  if (run.id.empty()) return InvalidArgument("run id is empty");
  // An empty status means a run that is starting.
  const std::string status = run.status.empty() ? "running" : run.status;
  if (!IsValidStatus(status)) {
    return InvalidArgument("run '" + run.id + "': status '" + status +
                           "' is not one of running, done, failed, cancelled");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kWrite);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  {
    BRAID_ASSIGN_OR_RETURN(SqliteStmt exists, db_->Prepare("SELECT 1 FROM runs WHERE id = ?1"));
    BRAID_RETURN_IF_ERROR(exists.BindText(1, run.id));
    BRAID_ASSIGN_OR_RETURN(bool found, exists.Step());
    if (found) return InvalidArgument("run '" + run.id + "' already exists");
  }
  const double now = clock_();
  {
    BRAID_ASSIGN_OR_RETURN(
        SqliteStmt insert,
        db_->Prepare("INSERT INTO runs (id, program, status, error, created_unix, finished_unix, "
                     "program_hash, owner) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
    BRAID_RETURN_IF_ERROR(insert.BindText(1, run.id));
    BRAID_RETURN_IF_ERROR(insert.BindText(2, run.program));
    BRAID_RETURN_IF_ERROR(insert.BindText(3, status));
    BRAID_RETURN_IF_ERROR(insert.BindText(4, run.error));
    // 0 means "now": callers normally let the store stamp the run.
    BRAID_RETURN_IF_ERROR(insert.BindDouble(5, run.created_unix != 0 ? run.created_unix : now));
    if (status != "running") BRAID_RETURN_IF_ERROR(insert.BindDouble(6, now));
    BRAID_RETURN_IF_ERROR(insert.BindText(7, run.program_hash));
    BRAID_RETURN_IF_ERROR(insert.BindText(8, run.owner));
    BRAID_RETURN_IF_ERROR(insert.Run());
  }
  BRAID_ASSIGN_OR_RETURN(
      SqliteStmt arg,
      db_->Prepare("INSERT INTO run_args (run_id, idx, value) VALUES (?1, ?2, ?3)"));
  for (size_t i = 0; i < run.args.size(); ++i) {
    BRAID_RETURN_IF_ERROR(arg.BindText(1, run.id));
    BRAID_RETURN_IF_ERROR(arg.BindInt64(2, static_cast<int64_t>(i)));
    BRAID_RETURN_IF_ERROR(arg.BindText(3, run.args[i]));
    BRAID_RETURN_IF_ERROR(arg.Run());
  }
  return txn.Commit();
}

Result<StoredRun> SqliteRunStore::GetRun(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kRead);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  StoredRun run;
  {
    BRAID_ASSIGN_OR_RETURN(
        SqliteStmt stmt,
        db_->Prepare("SELECT program, status, error, created_unix, program_hash, owner, attempts "
                     "FROM runs WHERE id = ?1"));
    BRAID_RETURN_IF_ERROR(stmt.BindText(1, id));
    BRAID_ASSIGN_OR_RETURN(bool found, stmt.Step());
    if (!found) return Status::NotFound(db_->path() + ": run '" + id + "' not found");
    run.id = id;
    run.program = stmt.ColumnText(0);
    run.status = stmt.ColumnText(1);
    run.error = stmt.ColumnText(2);
    run.created_unix = stmt.ColumnDouble(3);
    run.program_hash = stmt.ColumnText(4);
    run.owner = stmt.ColumnText(5);
    run.attempts = static_cast<int>(stmt.ColumnInt64(6));
  }
  BRAID_ASSIGN_OR_RETURN(run.args, LoadArgs(id));
  BRAID_RETURN_IF_ERROR(txn.Commit());
  return run;
}

Result<std::vector<StoredRun>> SqliteRunStore::ListRuns(int limit) { return List(nullptr, limit); }

Result<std::vector<StoredRun>> SqliteRunStore::ListRunsOf(const std::string& owner, int limit) {
  return List(&owner, limit);
}

Result<std::vector<StoredRun>> SqliteRunStore::List(const std::string* owner, int limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kRead);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  std::vector<StoredRun> runs;
  {
    // ?2 IS NULL: every owner. The newest-first index still orders the scan.
    BRAID_ASSIGN_OR_RETURN(SqliteStmt stmt,
                           db_->Prepare("SELECT id, program, status, error, created_unix, "
                                        "program_hash, owner, attempts FROM runs "
                                        "WHERE ?2 IS NULL OR owner = ?2 "
                                        "ORDER BY created_unix DESC, seq DESC LIMIT ?1"));
    // SQLite treats a negative LIMIT as no limit.
    BRAID_RETURN_IF_ERROR(stmt.BindInt64(1, limit > 0 ? limit : -1));
    if (owner) BRAID_RETURN_IF_ERROR(stmt.BindText(2, *owner));
    while (true) {
      BRAID_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      StoredRun run;
      run.id = stmt.ColumnText(0);
      run.program = stmt.ColumnText(1);
      run.status = stmt.ColumnText(2);
      run.error = stmt.ColumnText(3);
      run.created_unix = stmt.ColumnDouble(4);
      run.program_hash = stmt.ColumnText(5);
      run.owner = stmt.ColumnText(6);
      run.attempts = static_cast<int>(stmt.ColumnInt64(7));
      runs.push_back(std::move(run));
    }
  }
  for (StoredRun& run : runs) {
    BRAID_ASSIGN_OR_RETURN(run.args, LoadArgs(run.id));
  }
  BRAID_RETURN_IF_ERROR(txn.Commit());
  return runs;
}

Result<RunTotals> SqliteRunStore::Totals(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kRead);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  RunTotals t;
  {
    BRAID_ASSIGN_OR_RETURN(SqliteStmt stmt,
                           db_->Prepare("SELECT finished_unix FROM runs WHERE id = ?1"));
    BRAID_RETURN_IF_ERROR(stmt.BindText(1, id));
    BRAID_ASSIGN_OR_RETURN(bool found, stmt.Step());
    if (!found) return Status::NotFound(db_->path() + ": run '" + id + "' not found");
    t.finished_unix = stmt.ColumnIsNull(0) ? 0.0 : stmt.ColumnDouble(0);
  }
  {
    // The nodes' events carry their token counts (RunEvents::Node).
    BRAID_ASSIGN_OR_RETURN(
        SqliteStmt stmt,
        db_->Prepare("SELECT COALESCE(SUM(kind = 'node_finished'), 0), "
                     "COALESCE(SUM(kind = 'node_failed'), 0), "
                     "COALESCE(SUM(json_extract(data, '$.prompt_tokens')), 0), "
                     "COALESCE(SUM(json_extract(data, '$.cached_tokens')), 0), "
                     "COALESCE(SUM(json_extract(data, '$.generated_tokens')), 0) "
                     "FROM events WHERE run_id = ?1 AND kind IN ('node_finished', 'node_failed') "
                     "AND json_valid(data)"));
    BRAID_RETURN_IF_ERROR(stmt.BindText(1, id));
    BRAID_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (row) {
      t.nodes_done = static_cast<int>(stmt.ColumnInt64(0));
      t.nodes_failed = static_cast<int>(stmt.ColumnInt64(1));
      t.prompt_tokens = stmt.ColumnInt64(2);
      t.cached_tokens = stmt.ColumnInt64(3);
      t.generated_tokens = stmt.ColumnInt64(4);
    }
  }
  {
    // Each resume's gap since the event before it (events_by_run serves
    // the inner lookup).
    BRAID_ASSIGN_OR_RETURN(
        SqliteStmt stmt,
        db_->Prepare("SELECT COALESCE(SUM(e.at_unix - (SELECT MAX(p.at_unix) FROM events p "
                     "WHERE p.run_id = e.run_id AND p.seq < e.seq)), 0) "
                     "FROM events e WHERE e.run_id = ?1 AND e.kind = 'run_resumed'"));
    BRAID_RETURN_IF_ERROR(stmt.BindText(1, id));
    BRAID_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (row) t.paused_seconds = std::max(0.0, stmt.ColumnDouble(0));
  }
  BRAID_RETURN_IF_ERROR(txn.Commit());
  return t;
}

Status SqliteRunStore::DeleteRun(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kWrite);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_RETURN_IF_ERROR(RequireRun(id));
  // Foreign keys (enforced: Configure) cascade to args, calls, outputs, values, events.
  BRAID_ASSIGN_OR_RETURN(SqliteStmt stmt, db_->Prepare("DELETE FROM runs WHERE id = ?1"));
  BRAID_RETURN_IF_ERROR(stmt.BindText(1, id));
  BRAID_RETURN_IF_ERROR(stmt.Run());
  BRAID_RETURN_IF_ERROR(txn.Commit());
  Written(id);
  return Status::Ok();
}

Status SqliteRunStore::FinishRun(const std::string& id, const std::string& status,
                                 const std::string& error) {
  if (!IsValidStatus(status)) {
    return InvalidArgument("run '" + id + "': status '" + status +
                           "' is not one of running, done, failed, cancelled");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kWrite);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_ASSIGN_OR_RETURN(
      SqliteStmt stmt,
      db_->Prepare("UPDATE runs SET status = ?2, error = ?3, finished_unix = ?4 WHERE id = ?1"));
  BRAID_RETURN_IF_ERROR(stmt.BindText(1, id));
  BRAID_RETURN_IF_ERROR(stmt.BindText(2, status));
  BRAID_RETURN_IF_ERROR(stmt.BindText(3, error));
  // Setting a run back to "running" (a resume) clears its finish time (NULL).
  if (status != "running") BRAID_RETURN_IF_ERROR(stmt.BindDouble(4, clock_()));
  BRAID_RETURN_IF_ERROR(stmt.Run());
  if (sqlite3_changes(db_->handle()) == 0) {
    return Status::NotFound(db_->path() + ": run '" + id + "' not found");
  }
  BRAID_RETURN_IF_ERROR(WriteBuffered(id));
  BRAID_RETURN_IF_ERROR(txn.Commit());
  Written(id);
  return Status::Ok();
}

Result<int> SqliteRunStore::AddAttempt(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kWrite);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  {
    BRAID_ASSIGN_OR_RETURN(SqliteStmt stmt,
                           db_->Prepare("UPDATE runs SET attempts = attempts + 1 WHERE id = ?1"));
    BRAID_RETURN_IF_ERROR(stmt.BindText(1, id));
    BRAID_RETURN_IF_ERROR(stmt.Run());
    if (sqlite3_changes(db_->handle()) == 0)
      return Status::NotFound(db_->path() + ": run '" + id + "' not found");
  }
  int attempts = 0;
  {
    BRAID_ASSIGN_OR_RETURN(SqliteStmt stmt,
                           db_->Prepare("SELECT attempts FROM runs WHERE id = ?1"));
    BRAID_RETURN_IF_ERROR(stmt.BindText(1, id));
    BRAID_ASSIGN_OR_RETURN(bool found, stmt.Step());
    if (found) attempts = static_cast<int>(stmt.ColumnInt64(0));
  }
  BRAID_RETURN_IF_ERROR(txn.Commit());
  return attempts;
}

// ---- calls ----

Status SqliteRunStore::RecordCall(const std::string& run_id, const StoredCall& call) {
  if (call.key.empty()) return InvalidArgument("run '" + run_id + "': call key is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kWrite);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_RETURN_IF_ERROR(RequireRun(run_id));
  // A key is recorded once. Recording the same call again (a retry after an
  // error whose commit did in fact land) is accepted; recording different
  // outputs under a key would change a value the program may already have
  // seen, so it is refused.
  BRAID_ASSIGN_OR_RETURN(std::optional<StoredCall> existing, LoadCall(run_id, call.key));
  if (existing) {
    if (existing->function == call.function && existing->outputs == call.outputs) {
      return Status::Ok();  // the transaction only read; rolling it back is free
    }
    return InvalidArgument("run '" + run_id + "': call '" + call.key +
                           "' is already recorded with different outputs");
  }
  {
    // ordinal = number of calls already recorded in this run (calls_by_ordinal
    // makes the MAX an index lookup).
    BRAID_ASSIGN_OR_RETURN(
        SqliteStmt insert,
        db_->Prepare("INSERT INTO calls (run_id, key, function, ordinal, recorded_unix) "
                     "VALUES (?1, ?2, ?3, "
                     "(SELECT COALESCE(MAX(ordinal) + 1, 0) FROM calls WHERE run_id = ?1), ?4)"));
    BRAID_RETURN_IF_ERROR(insert.BindText(1, run_id));
    BRAID_RETURN_IF_ERROR(insert.BindText(2, call.key));
    BRAID_RETURN_IF_ERROR(insert.BindText(3, call.function));
    BRAID_RETURN_IF_ERROR(insert.BindDouble(4, clock_()));
    BRAID_RETURN_IF_ERROR(insert.Run());
  }
  {
    // A recorded call is progress: the attempts without any start again.
    BRAID_ASSIGN_OR_RETURN(
        SqliteStmt reset,
        db_->Prepare("UPDATE runs SET attempts = 0 WHERE id = ?1 AND attempts != 0"));
    BRAID_RETURN_IF_ERROR(reset.BindText(1, run_id));
    BRAID_RETURN_IF_ERROR(reset.Run());
  }
  BRAID_ASSIGN_OR_RETURN(
      SqliteStmt output,
      db_->Prepare("INSERT INTO call_outputs (run_id, key, name, value) VALUES (?1, ?2, ?3, ?4)"));
  for (const auto& [name, value] : call.outputs) {
    BRAID_RETURN_IF_ERROR(output.BindText(1, run_id));
    BRAID_RETURN_IF_ERROR(output.BindText(2, call.key));
    BRAID_RETURN_IF_ERROR(output.BindText(3, name));
    BRAID_RETURN_IF_ERROR(output.BindText(4, value));
    BRAID_RETURN_IF_ERROR(output.Run());
  }
  // The values the program read before this call are written with it.
  BRAID_RETURN_IF_ERROR(WriteBuffered(run_id));
  BRAID_RETURN_IF_ERROR(txn.Commit());
  Written(run_id);
  return Status::Ok();
}

Result<std::optional<StoredCall>> SqliteRunStore::FindCall(const std::string& run_id,
                                                           const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kRead);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_RETURN_IF_ERROR(RequireRun(run_id));
  BRAID_ASSIGN_OR_RETURN(std::optional<StoredCall> call, LoadCall(run_id, key));
  BRAID_RETURN_IF_ERROR(txn.Commit());
  return call;
}

Result<std::vector<StoredCall>> SqliteRunStore::Calls(const std::string& run_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kRead);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_RETURN_IF_ERROR(RequireRun(run_id));
  std::vector<StoredCall> calls;
  {
    // One pass: calls in recording order, each followed by its outputs (a call
    // with no outputs yields one row with NULL name).
    BRAID_ASSIGN_OR_RETURN(
        SqliteStmt stmt,
        db_->Prepare("SELECT c.key, c.function, o.name, o.value FROM calls AS c "
                     "LEFT JOIN call_outputs AS o ON o.run_id = c.run_id AND o.key = c.key "
                     "WHERE c.run_id = ?1 ORDER BY c.ordinal, o.name"));
    BRAID_RETURN_IF_ERROR(stmt.BindText(1, run_id));
    while (true) {
      BRAID_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      std::string key = stmt.ColumnText(0);
      if (calls.empty() || calls.back().key != key) {
        StoredCall call;
        call.key = std::move(key);
        call.function = stmt.ColumnText(1);
        calls.push_back(std::move(call));
      }
      if (!stmt.ColumnIsNull(2))
        calls.back().outputs.emplace(stmt.ColumnText(2), stmt.ColumnText(3));
    }
  }
  BRAID_RETURN_IF_ERROR(txn.Commit());
  return calls;
}

// ---- host values and events ----

std::optional<std::string> SqliteRunStore::BufferedValue(const std::string& run_id,
                                                         const std::string& key) const {
  auto run = buffered_.find(run_id);
  if (run == buffered_.end()) return std::nullopt;
  auto it = run->second.find(key);
  if (it == run->second.end()) return std::nullopt;
  return it->second.value;
}

Result<std::optional<std::string>> SqliteRunStore::CheckValue(const std::string& run_id,
                                                              const std::string& key,
                                                              const std::string& value) {
  std::optional<std::string> existing = BufferedValue(run_id, key);
  if (!existing) {
    BRAID_ASSIGN_OR_RETURN(existing, LoadValue(run_id, key));
  }
  // Same rule as RecordCall: the same value again is fine, a different one is not.
  if (existing && *existing != value) {
    return InvalidArgument("run '" + run_id + "': host value '" + key +
                           "' is already recorded with a different value");
  }
  return existing;
}

Status SqliteRunStore::WriteBuffered(const std::string& run_id) {
  auto run = buffered_.find(run_id);
  if (run == buffered_.end()) return Status::Ok();
  BRAID_ASSIGN_OR_RETURN(SqliteStmt stmt,
                         db_->Prepare("INSERT INTO host_values (run_id, key, value, recorded_unix) "
                                      "VALUES (?1, ?2, ?3, ?4)"));
  for (const auto& [key, v] : run->second) {
    BRAID_RETURN_IF_ERROR(stmt.BindText(1, run_id));
    BRAID_RETURN_IF_ERROR(stmt.BindText(2, key));
    BRAID_RETURN_IF_ERROR(stmt.BindText(3, v.value));
    BRAID_RETURN_IF_ERROR(stmt.BindDouble(4, v.recorded_unix));
    BRAID_RETURN_IF_ERROR(stmt.Run());
  }
  return Status::Ok();
}

Status SqliteRunStore::RecordValue(const std::string& run_id, const std::string& key,
                                   const std::string& value) {
  if (key.empty()) return InvalidArgument("run '" + run_id + "': host value key is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kWrite);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_RETURN_IF_ERROR(RequireRun(run_id));
  BRAID_ASSIGN_OR_RETURN(std::optional<std::string> existing, CheckValue(run_id, key, value));
  if (!existing) buffered_[run_id][key] = {value, clock_()};
  BRAID_RETURN_IF_ERROR(WriteBuffered(run_id));
  BRAID_RETURN_IF_ERROR(txn.Commit());
  Written(run_id);
  return Status::Ok();
}

Status SqliteRunStore::BufferValue(const std::string& run_id, const std::string& key,
                                   const std::string& value) {
  if (key.empty()) return InvalidArgument("run '" + run_id + "': host value key is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  // A run with values waiting was there when the first one came (DeleteRun
  // drops them).
  if (!buffered_.count(run_id)) BRAID_RETURN_IF_ERROR(RequireRun(run_id));
  BRAID_ASSIGN_OR_RETURN(std::optional<std::string> existing, CheckValue(run_id, key, value));
  if (existing) return Status::Ok();
  auto& run = buffered_[run_id];
  run[key] = {value, clock_()};
  if (run.size() < kValueBatch) return Status::Ok();
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kWrite);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_RETURN_IF_ERROR(WriteBuffered(run_id));
  BRAID_RETURN_IF_ERROR(txn.Commit());
  Written(run_id);
  return Status::Ok();
}

Result<std::optional<std::string>> SqliteRunStore::FindValue(const std::string& run_id,
                                                             const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::optional<std::string> buffered = BufferedValue(run_id, key)) return buffered;
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kRead);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_RETURN_IF_ERROR(RequireRun(run_id));
  BRAID_ASSIGN_OR_RETURN(std::optional<std::string> value, LoadValue(run_id, key));
  BRAID_RETURN_IF_ERROR(txn.Commit());
  return value;
}

Status SqliteRunStore::AppendEvent(const std::string& run_id, const std::string& kind,
                                   const std::string& data) {
  if (kind.empty()) return InvalidArgument("run '" + run_id + "': event kind is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTxn txn(db_.get(), SqliteTxn::Mode::kWrite);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_RETURN_IF_ERROR(RequireRun(run_id));
  BRAID_ASSIGN_OR_RETURN(
      SqliteStmt stmt,
      db_->Prepare("INSERT INTO events (run_id, kind, data, at_unix) VALUES (?1, ?2, ?3, ?4)"));
  BRAID_RETURN_IF_ERROR(stmt.BindText(1, run_id));
  BRAID_RETURN_IF_ERROR(stmt.BindText(2, kind));
  BRAID_RETURN_IF_ERROR(stmt.BindText(3, data));
  BRAID_RETURN_IF_ERROR(stmt.BindDouble(4, clock_()));
  BRAID_RETURN_IF_ERROR(stmt.Run());
  return txn.Commit();
}

// Applies the connection settings. journal_mode must be set outside a
// transaction; it is also the first statement that reads the file, so a file
// that is not a database fails here with SQLITE_NOTADB.
//
// locking_mode=EXCLUSIVE comes first: in WAL mode it makes SQLite keep the
// WAL index in heap memory instead of a shared `-shm` file that every
// connection mmaps. With a mapped -shm, anything that truncates that file
// while the store is open (another program, a cleanup script) kills the
// process with SIGBUS on its next access; there is nothing to catch. The cost
// is that one process at a time holds the store, for as long as it is open
// (a braid run: the whole run); another that opens it waits busy_timeout and
// gets an IoError saying the store is in use.
Status Configure(SqliteDb& db, bool sync_full) {
  BRAID_RETURN_IF_ERROR(db.Exec("PRAGMA locking_mode = EXCLUSIVE", "set locking_mode=EXCLUSIVE"));
  Result<std::string> set_mode = db.QueryText("PRAGMA journal_mode = WAL", "set journal_mode=WAL");
  if (!set_mode.ok()) {
    if ((sqlite3_errcode(db.handle()) & 0xff) == SQLITE_BUSY) {
      return Status::IoError(db.path() +
                             ": the run store is in use by another process (it holds the store "
                             "while open); wait for it to finish or use another store file");
    }
    return set_mode.status();
  }
  const std::string mode = *set_mode;
  BRAID_RETURN_IF_ERROR(db.Exec(
      sync_full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL", "set synchronous"));
  BRAID_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys = ON", "enable foreign keys"));
  BRAID_ASSIGN_OR_RETURN(std::string fk, db.QueryText("PRAGMA foreign_keys", "read foreign_keys"));
  if (fk != "1") {
    return Status::Unsupported(db.path() + ": this SQLite build cannot enforce foreign keys");
  }
  return Status::Ok();
}

// PRAGMA quick_check: the b-tree structure of every table and index (not
// that indexes match their tables, which integrity_check adds at several times
// the cost). A damaged store is refused rather than appended to: a resume
// could replay garbage, and writing into a damaged b-tree can spread the
// damage. Nothing is written before this check, so the file stays as it was
// for recovery (sqlite3's .recover).
Status CheckIntegrity(SqliteDb& db) {
  BRAID_ASSIGN_OR_RETURN(std::string result, db.QueryText("PRAGMA quick_check", "quick_check"));
  if (result == "ok") return Status::Ok();
  return Status::Corruption(db.path() + ": the run store is damaged (quick_check: " + result +
                            "); it was left as it is: move it aside to start a new one, or "
                            "recover its contents with sqlite3's .recover");
}

}  // namespace

Result<std::unique_ptr<RunStore>> OpenSqliteRunStore(const std::string& path,
                                                     const SqliteRunStoreOptions& options) {
  if (path.empty()) {
    // SQLite would silently open a private temporary file; say what is wrong instead.
    return Status::InvalidArgument(
        "run store path is empty (use \":memory:\" for a private store)");
  }
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db,
                         SqliteDb::Open(path, options.busy_timeout_ms));
  BRAID_RETURN_IF_ERROR(Configure(*db, options.sync_full));
  BRAID_RETURN_IF_ERROR(CheckIntegrity(*db));
  BRAID_RETURN_IF_ERROR(MigrateRunStore(*db));
  std::function<double()> clock = options.clock ? options.clock : SystemClock;
  return std::unique_ptr<RunStore>(new SqliteRunStore(std::move(db), std::move(clock)));
}

Result<std::unique_ptr<RunStore>> RunStore::Open(const std::string& path) {
  return OpenSqliteRunStore(path, SqliteRunStoreOptions{});
}

}  // namespace braid::rt
