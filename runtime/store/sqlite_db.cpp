#include "sqlite_db.h"

#include <limits>

namespace braid::rt {
namespace {

// "<path>: <what>: <message>", with SQLite's name for the code appended when
// the message does not already say it (e.g. "... (disk I/O error)").
std::string Describe(const std::string& path, const std::string& what, const std::string& message,
                     int rc) {
  std::string code = sqlite3_errstr(rc);
  std::string out = path + ": " + what + ": " + message;
  if (message != code) out += " (" + code + ")";
  return out;
}

}  // namespace

StatusCode SqliteStatusCode(int rc) {
  switch (rc & 0xff) {  // the primary code; extended codes keep it in the low byte
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return StatusCode::kCorruption;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return StatusCode::kResourceExhausted;
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return StatusCode::kIoError;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
    case SQLITE_TOOBIG:
      return StatusCode::kInvalidArgument;
    default:
      return StatusCode::kInternal;
  }
}

// ---- SqliteStmt ----

SqliteStmt::~SqliteStmt() {
  if (stmt_ == nullptr) return;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

Status SqliteStmt::BindText(int index, std::string_view value) {
  if (value.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Status::InvalidArgument(db_->path() + ": value of " + std::to_string(value.size()) +
                                   " bytes is too large to store");
  }
  // SQLite wants a non-null pointer for a zero-length TEXT (null binds NULL).
  const char* data = value.data() != nullptr ? value.data() : "";
  int rc = sqlite3_bind_text(stmt_, index, data, static_cast<int>(value.size()), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) return db_->Error(rc, "bind parameter " + std::to_string(index));
  return Status::Ok();
}

Status SqliteStmt::BindInt64(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) return db_->Error(rc, "bind parameter " + std::to_string(index));
  return Status::Ok();
}

Status SqliteStmt::BindDouble(int index, double value) {
  int rc = sqlite3_bind_double(stmt_, index, value);
  if (rc != SQLITE_OK) return db_->Error(rc, "bind parameter " + std::to_string(index));
  return Status::Ok();
}

Result<bool> SqliteStmt::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(rc, std::string("step '") + sqlite3_sql(stmt_) + "'");
}

Status SqliteStmt::Run() {
  while (true) {
    Result<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) {
      sqlite3_reset(stmt_);
      return Status::Ok();
    }
  }
}

std::string SqliteStmt::ColumnText(int index) {
  // Blob access returns the exact bytes whatever the stored type; the length
  // must be read after the pointer (sqlite.org/c3ref/column_blob.html).
  const void* data = sqlite3_column_blob(stmt_, index);
  int size = sqlite3_column_bytes(stmt_, index);
  if (data == nullptr || size <= 0) return std::string();
  return std::string(static_cast<const char*>(data), static_cast<size_t>(size));
}

bool SqliteStmt::ColumnIsNull(int index) {
  return sqlite3_column_type(stmt_, index) == SQLITE_NULL;
}

int64_t SqliteStmt::ColumnInt64(int index) { return sqlite3_column_int64(stmt_, index); }

double SqliteStmt::ColumnDouble(int index) { return sqlite3_column_double(stmt_, index); }

// ---- SqliteDb ----

Result<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path, int busy_timeout_ms) {
  sqlite3* handle = nullptr;
  // NOMUTEX: the owner serializes access; SQLite's own mutex would be redundant.
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &handle, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = handle != nullptr ? sqlite3_errmsg(handle) : sqlite3_errstr(rc);
    sqlite3_close_v2(handle);  // harmless on null
    return Status(SqliteStatusCode(rc), Describe(path, "open", message, rc));
  }
  std::unique_ptr<SqliteDb> db(new SqliteDb(path, handle));
  sqlite3_extended_result_codes(handle, 1);
  rc = sqlite3_busy_timeout(handle, busy_timeout_ms);
  if (rc != SQLITE_OK) return db->Error(rc, "set busy_timeout");
  return db;
}

SqliteDb::~SqliteDb() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  cache_.clear();
  // close_v2 never fails for a busy connection; it defers the close instead.
  sqlite3_close_v2(db_);
}

Status SqliteDb::Error(int rc, const std::string& what) const {
  // sqlite3_errmsg describes the most recent failing call on this connection;
  // when it is stale (e.g. "not an error") fall back to the code's text.
  std::string message = sqlite3_errmsg(db_);
  if (sqlite3_errcode(db_) == SQLITE_OK) message = sqlite3_errstr(rc);
  return Status(SqliteStatusCode(rc), Describe(path_, what, message, rc));
}

Status SqliteDb::Exec(const std::string& sql, const char* what) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string message = err != nullptr ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return Status(SqliteStatusCode(rc), Describe(path_, what, message, rc));
}

Result<std::string> SqliteDb::QueryText(const std::string& sql, const char* what) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, nullptr);
  if (rc != SQLITE_OK) return Error(rc, what);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
  rc = sqlite3_step(raw);
  if (rc == SQLITE_DONE) return std::string();
  if (rc != SQLITE_ROW) return Error(rc, what);
  const unsigned char* text = sqlite3_column_text(raw, 0);
  return text != nullptr ? std::string(reinterpret_cast<const char*>(text)) : std::string();
}

Result<SqliteStmt> SqliteDb::Prepare(const char* sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* stmt = nullptr;
    // PREPARE_PERSISTENT: these statements live as long as the connection.
    int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error(rc, std::string("prepare '") + sql + "'");
    it = cache_.emplace(sql, stmt).first;
  }
  return SqliteStmt(this, it->second);
}

// ---- SqliteTxn ----

SqliteTxn::~SqliteTxn() {
  if (!open_) return;
  // After some errors (e.g. SQLITE_FULL, IOERR) SQLite has already rolled the
  // transaction back; a ROLLBACK then would report "no transaction is active".
  if (!sqlite3_get_autocommit(db_->handle())) {
    Result<SqliteStmt> rollback = db_->Prepare("ROLLBACK");
    if (rollback.ok()) (void)rollback->Run();
  }
}

Status SqliteTxn::Begin() {
  BRAID_ASSIGN_OR_RETURN(SqliteStmt begin,
                         db_->Prepare(mode_ == Mode::kWrite ? "BEGIN IMMEDIATE" : "BEGIN"));
  BRAID_RETURN_IF_ERROR(begin.Run());
  open_ = true;
  return Status::Ok();
}

Status SqliteTxn::Commit() {
  BRAID_ASSIGN_OR_RETURN(SqliteStmt commit, db_->Prepare("COMMIT"));
  Status s = commit.Run();
  // On failure the transaction may still be open (e.g. SQLITE_BUSY on COMMIT);
  // the destructor rolls it back.
  if (s.ok()) open_ = false;
  return s;
}

}  // namespace braid::rt
