// The run store's schema and its migrations, private to runtime/store/.
//
// The schema version lives in SQLite's `PRAGMA user_version`; the file is
// marked as Braid's with `PRAGMA application_id`. Migrations are applied in
// order, all pending ones in one BEGIN IMMEDIATE transaction, so two processes
// opening a new file at once cannot both create the tables.
#pragma once

#include "engine/status.h"
#include "sqlite_db.h"

namespace braid::rt {

// The newest schema version this build writes and understands.
inline constexpr int kRunStoreSchemaVersion = 5;
// 'BRDS': marks a SQLite file as a Braid run store.
inline constexpr int kRunStoreApplicationId = 0x42524453;

// Brings the database up to kRunStoreSchemaVersion. Errors: Unsupported when
// the file was written by a newer schema; InvalidArgument when the file is
// another application's SQLite database; SQLite errors otherwise.
Status MigrateRunStore(SqliteDb& db);

}  // namespace braid::rt
