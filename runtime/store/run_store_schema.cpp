#include "run_store_schema.h"

#include <string>

namespace braid::rt {
namespace {

struct Migration {
  int version;      // user_version after this step
  const char* sql;  // DDL run inside the migration transaction
};

// Version 1.
//
// runs: `seq` is the rowid alias, a stable insertion order that breaks ties
//   between runs created in the same second (VACUUM may renumber an implicit
//   rowid but never an INTEGER PRIMARY KEY).
// run_args: a run's argument list, one row per argument.
// calls: PRIMARY KEY (run_id, key) is the resume lookup; `ordinal` is the
//   recording order within the run (what Calls() returns).
// call_outputs: one row per output of a call. A child table rather than JSON
//   text: values are arbitrary bytes (model output need not be valid UTF-8,
//   which a JSON serializer rejects), nothing needs parsing on read, and a
//   call and its outputs are written in one transaction either way.
// host_values: values of non-deterministic Lua functions, replayed on resume.
// events: append-only log; AUTOINCREMENT so a sequence number is never reused.
// Every child table's key starts with run_id, which is the index that the
// foreign keys' ON DELETE CASCADE needs.
constexpr char kSchemaV1[] = R"sql(
CREATE TABLE runs (
  seq           INTEGER PRIMARY KEY,
  id            TEXT NOT NULL UNIQUE,
  program       TEXT NOT NULL,
  status        TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
  error         TEXT NOT NULL DEFAULT '',
  created_unix  REAL NOT NULL,
  finished_unix REAL
);
CREATE INDEX runs_by_created ON runs (created_unix DESC, seq DESC);

CREATE TABLE run_args (
  run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  idx    INTEGER NOT NULL,
  value  TEXT NOT NULL,
  PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;

CREATE TABLE calls (
  run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  key           TEXT NOT NULL,
  function      TEXT NOT NULL,
  ordinal       INTEGER NOT NULL,
  recorded_unix REAL NOT NULL,
  PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE UNIQUE INDEX calls_by_ordinal ON calls (run_id, ordinal);

CREATE TABLE call_outputs (
  run_id TEXT NOT NULL,
  key    TEXT NOT NULL,
  name   TEXT NOT NULL,
  value  TEXT NOT NULL,
  PRIMARY KEY (run_id, key, name),
  FOREIGN KEY (run_id, key) REFERENCES calls (run_id, key) ON DELETE CASCADE
) WITHOUT ROWID;

CREATE TABLE host_values (
  run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  key           TEXT NOT NULL,
  value         TEXT NOT NULL,
  recorded_unix REAL NOT NULL,
  PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE TABLE events (
  seq     INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  kind    TEXT NOT NULL,
  data    TEXT NOT NULL,
  at_unix REAL NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, seq);
)sql";

// Version 2: runs.program_hash, a digest of the program's source, so that a
// resume can tell an edited program from the one that made the record. Runs
// recorded before have '' (unknown).
constexpr char kSchemaV2[] = R"sql(
ALTER TABLE runs ADD COLUMN program_hash TEXT NOT NULL DEFAULT '';
)sql";

// Version 3: runs.owner, the client a run belongs to (an API key's name on
// braid serve), so that a restarted server keeps each run with its client and
// shows it to no other. Runs recorded before have '' (no client).
constexpr char kSchemaV3[] = R"sql(
ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
)sql";

// Version 4: runs.attempts, how many times a server started executing the
// run since it last recorded a call (RunStore::AddAttempt; RecordCall sets it
// back to 0), so that braid serve stops resuming a run that was interrupted
// again and again without progress (it crashed the server, or the server
// kept stopping under it). Runs recorded before have 0.
constexpr char kSchemaV4[] = R"sql(
ALTER TABLE runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 5: runs.status may be 'cancelled' (a run cancelled by its client,
// told apart from one that failed). SQLite cannot change a CHECK in place:
// the table is made anew, copied and renamed (SQLite's documented procedure
// for schema changes ALTER TABLE cannot make, run with foreign keys off, so
// that dropping the old table does not cascade into its children, whose
// references then name the new one).
constexpr char kSchemaV5[] = R"sql(
CREATE TABLE runs_v5 (
  seq           INTEGER PRIMARY KEY,
  id            TEXT NOT NULL UNIQUE,
  program       TEXT NOT NULL,
  status        TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'cancelled')),
  error         TEXT NOT NULL DEFAULT '',
  created_unix  REAL NOT NULL,
  finished_unix REAL,
  program_hash  TEXT NOT NULL DEFAULT '',
  owner         TEXT NOT NULL DEFAULT '',
  attempts      INTEGER NOT NULL DEFAULT 0
);
INSERT INTO runs_v5 (seq, id, program, status, error, created_unix, finished_unix, program_hash,
                     owner, attempts)
  SELECT seq, id, program, status, error, created_unix, finished_unix, program_hash, owner,
         attempts FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v5 RENAME TO runs;
CREATE INDEX runs_by_created ON runs (created_unix DESC, seq DESC);
)sql";

constexpr Migration kMigrations[] = {
    {1, kSchemaV1}, {2, kSchemaV2}, {3, kSchemaV3}, {4, kSchemaV4}, {5, kSchemaV5},
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kRunStoreSchemaVersion,
              "one migration per schema version");

Result<int> ReadIntPragma(SqliteDb& db, const char* sql, const char* what) {
  BRAID_ASSIGN_OR_RETURN(std::string text, db.QueryText(sql, what));
  try {
    return text.empty() ? 0 : std::stoi(text);
  } catch (...) {  // stoi throws on garbage; SQLite never returns it, but no exception escapes
    return Status::Corruption(db.path() + ": " + what + ": unexpected value '" + text + "'");
  }
}

}  // namespace

// The migrations after the file's version, in one write transaction.
static Status MigrateInTransaction(SqliteDb& db) {
  // The version is read inside the write transaction: a second process that
  // opened the same new file waits here and then sees version 1.
  SqliteTxn txn(&db, SqliteTxn::Mode::kWrite);
  BRAID_RETURN_IF_ERROR(txn.Begin());
  BRAID_ASSIGN_OR_RETURN(int app_id,
                         ReadIntPragma(db, "PRAGMA application_id", "read application_id"));
  BRAID_ASSIGN_OR_RETURN(int version,
                         ReadIntPragma(db, "PRAGMA user_version", "read user_version"));
  if (app_id != 0 && app_id != kRunStoreApplicationId) {
    return Status::InvalidArgument(db.path() + ": not a Braid run store (application_id " +
                                   std::to_string(app_id) + ")");
  }
  if (version > kRunStoreSchemaVersion) {
    return Status::Unsupported(db.path() + ": schema version " + std::to_string(version) +
                               " is newer than this build's " +
                               std::to_string(kRunStoreSchemaVersion));
  }
  if (version == 0) {
    // A fresh file has no tables; one with tables but no version is someone
    // else's database, which we must not write into.
    BRAID_ASSIGN_OR_RETURN(std::string tables,
                           db.QueryText("SELECT count(*) FROM sqlite_schema", "read schema"));
    if (tables != "0") {
      return Status::InvalidArgument(db.path() + ": not a Braid run store (" + tables +
                                     " foreign schema objects and no user_version)");
    }
  }
  bool migrated = false;
  for (const Migration& m : kMigrations) {
    if (m.version <= version) continue;
    migrated = true;
    BRAID_RETURN_IF_ERROR(db.Exec(m.sql, "migrate schema"));
    BRAID_RETURN_IF_ERROR(
        db.Exec("PRAGMA user_version = " + std::to_string(m.version), "set user_version"));
  }
  if (app_id == 0) {
    BRAID_RETURN_IF_ERROR(db.Exec(
        "PRAGMA application_id = " + std::to_string(kRunStoreApplicationId), "set application_id"));
  }
  std::string dangling = "0";
  if (migrated) {
    BRAID_ASSIGN_OR_RETURN(
        dangling, db.QueryText("SELECT count(*) FROM pragma_foreign_key_check", "check keys"));
  }
  if (dangling != "0")
    return Status::Corruption(
        db.path() + ": " + dangling +
        " rows refer to runs that do not exist; the store was left as it was");
  return txn.Commit();
}

Status MigrateRunStore(SqliteDb& db) {
  // Foreign keys are off while the schema changes (version 5 remakes a
  // parent table) and checked before the change commits; the pragma has no
  // effect inside a transaction, so it goes around it.
  BRAID_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys = OFF", "migrate schema"));
  Status s = MigrateInTransaction(db);
  Status on = db.Exec("PRAGMA foreign_keys = ON", "migrate schema");
  return s.ok() ? on : s;
}

}  // namespace braid::rt
