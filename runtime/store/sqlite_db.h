// Thin RAII wrappers over the SQLite C API, private to runtime/store/.
//
// SqliteDb owns one connection and a cache of prepared statements keyed by
// their SQL text. It is NOT thread-safe: the owner (SqliteRunStore) serializes
// every call behind its own mutex. Every error is a Status whose message names
// the database path, the operation, and SQLite's own message and error code.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "engine/status.h"

namespace braid::rt {

class SqliteDb;

// A cached prepared statement checked out for one use. Binding and stepping go
// through it; its destructor resets the statement and clears the bindings so
// the next user starts clean (and so a read statement never holds a read
// transaction open after its last row).
class SqliteStmt {
 public:
  SqliteStmt(SqliteDb* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;
  SqliteStmt(SqliteStmt&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
  }
  SqliteStmt& operator=(SqliteStmt&&) = delete;
  ~SqliteStmt();

  // Parameters are 1-based, as in SQLite. Strings are copied (SQLITE_TRANSIENT)
  // and bound as TEXT with their exact byte length, so embedded NULs and
  // non-UTF-8 bytes round-trip unchanged.
  Status BindText(int index, std::string_view value);
  Status BindInt64(int index, int64_t value);
  Status BindDouble(int index, double value);

  // Steps once: true when a row is available, false when the statement is done.
  Result<bool> Step();
  // Steps until done, for statements that return no rows, then resets the
  // statement (bindings kept) so it can be bound and run again.
  Status Run();

  // Column accessors for the current row (0-based, as in SQLite).
  std::string ColumnText(int index);
  bool ColumnIsNull(int index);
  int64_t ColumnInt64(int index);
  double ColumnDouble(int index);

 private:
  SqliteDb* db_;
  sqlite3_stmt* stmt_;
};

class SqliteDb {
 public:
  // Opens (creating if missing) the database at `path`; ":memory:" gives a
  // private in-memory database. Sets busy_timeout before anything else touches
  // the file. Does not read the file yet: a file that is not a database is
  // reported by the first statement that reads it.
  static Result<std::unique_ptr<SqliteDb>> Open(const std::string& path, int busy_timeout_ms);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs one or more SQL statements that return no rows we need (DDL, PRAGMA
  // settings, BEGIN/COMMIT). `what` names the operation in error messages.
  Status Exec(const std::string& sql, const char* what);

  // Runs a single-row query (e.g. a PRAGMA) and returns its first column as
  // text; empty when it returns no row.
  Result<std::string> QueryText(const std::string& sql, const char* what);

  // Returns the cached prepared statement for `sql`, preparing it on first
  // use. `sql` must be a single statement, and one SQL text must not be
  // checked out twice at once (the two would share one sqlite3_stmt).
  Result<SqliteStmt> Prepare(const char* sql);

  // A Status for the connection's last error: "<path>: <what>: <message> (<code name>)".
  Status Error(int rc, const std::string& what) const;

  const std::string& path() const { return path_; }
  sqlite3* handle() { return db_; }

 private:
  SqliteDb(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

  std::string path_;
  sqlite3* db_;
  // Keyed by the SQL text; the statements are finalized before the connection
  // closes.
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

// A transaction on one connection. kWrite begins with BEGIN IMMEDIATE, so the
// write lock is taken up front (waiting up to busy_timeout) rather than on the
// first write, where a deferred transaction would get SQLITE_BUSY at once
// without the busy handler being called. kRead begins with BEGIN (deferred),
// giving a consistent snapshot across several SELECTs. Rolls back on
// destruction unless Commit() succeeded.
class SqliteTxn {
 public:
  enum class Mode { kRead, kWrite };
  SqliteTxn(SqliteDb* db, Mode mode) : db_(db), mode_(mode) {}
  SqliteTxn(const SqliteTxn&) = delete;
  SqliteTxn& operator=(const SqliteTxn&) = delete;
  ~SqliteTxn();

  Status Begin();
  // For kWrite: durable on return under synchronous=FULL.
  Status Commit();

 private:
  SqliteDb* db_;
  Mode mode_;
  bool open_ = false;
};

// Maps a SQLite result code to our vocabulary: CORRUPT/NOTADB -> Corruption,
// FULL/NOMEM -> ResourceExhausted, CANTOPEN/IOERR/READONLY/PERM/BUSY/LOCKED ->
// IoError, CONSTRAINT/MISMATCH/RANGE/TOOBIG -> InvalidArgument, else Internal.
StatusCode SqliteStatusCode(int rc);

}  // namespace braid::rt
