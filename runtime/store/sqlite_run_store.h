// The SQLite implementation of RunStore, with the knobs that RunStore::Open
// fixes. Private to runtime/store/: the runtime uses RunStore::Open; tests and
// the store's benchmark use this to vary the settings or inject a clock.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "store/run_store.h"

namespace braid::rt {

struct SqliteRunStoreOptions {
  // synchronous=FULL (true) fsyncs the WAL at every commit, so a value is on
  // disk when RecordCall returns and survives power loss. false selects
  // synchronous=NORMAL, which survives a process crash but may lose the last
  // commits on power loss; only the benchmark uses it, for comparison.
  bool sync_full = true;
  // How long a writer waits for another connection's write lock before
  // failing with IoError ("database is locked").
  int busy_timeout_ms = 10000;
  // Seconds since the Unix epoch; stamps created_unix (when the caller left it
  // 0), finished_unix, recorded_unix and event times. Null: the system clock.
  std::function<double()> clock;
};

// Opens or creates the store at `path` (":memory:" for a private in-memory
// database) with `options`. Errors name the path and SQLite's message; a file
// that is not a SQLite database gives Corruption.
Result<std::unique_ptr<RunStore>> OpenSqliteRunStore(const std::string& path,
                                                     const SqliteRunStoreOptions& options);

}  // namespace braid::rt
