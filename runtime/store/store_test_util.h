// Helpers shared by the run store's tests: a temporary directory removed on
// destruction, and raw single-value queries against a store's file.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "sqlite_db.h"

namespace braid::rt::testing {

// A fresh directory under the system temp dir; removed with its contents when
// the object goes out of scope.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "braid_store_XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  bool ok() const { return !path_.empty(); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Runs one statement `sql` on a separate connection to the file at `path` and returns the
// first column of its first row, or "error: ..." so a CHECK shows the cause.
inline std::string RawQuery(const std::string& path, const std::string& sql) {
  Result<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path, 5000);
  if (!db.ok()) return "error: " + db.status().ToString();
  Result<std::string> value = (*db)->QueryText(sql, "test query");
  if (!value.ok()) return "error: " + value.status().ToString();
  return *value;
}

// Runs statements that return nothing on a separate connection; "ok" or the error.
inline std::string RawExec(const std::string& path, const std::string& sql) {
  Result<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path, 5000);
  if (!db.ok()) return "error: " + db.status().ToString();
  Status s = (*db)->Exec(sql, "test statement");
  return s.ok() ? "ok" : "error: " + s.ToString();
}

}  // namespace braid::rt::testing
