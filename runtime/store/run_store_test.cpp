// RunStore: round trips of every method on ":memory:" and on a file, reopening,
// ordering, misses, unknown runs, the duplicate rules, binary-safe values,
// concurrent writers and bad files.
#include "store/run_store.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "sqlite_run_store.h"
#include "store_test_util.h"

namespace braid::rt {
namespace {

using testing::RawExec;
using testing::RawQuery;
using testing::TempDir;

std::unique_ptr<RunStore> MustOpen(const std::string& path,
                                   const SqliteRunStoreOptions& options = {}) {
  Result<std::unique_ptr<RunStore>> store = OpenSqliteRunStore(path, options);
  REQUIRE_MESSAGE(store.ok(), store.status().ToString());
  return std::move(store).value();
}

StoredRun MakeRun(const std::string& id, double created = 0) {
  StoredRun run;
  run.id = id;
  run.program = "apps/" + id + ".lua";
  run.args = {"--in", "sample.txt", ""};
  run.status = "running";
  run.created_unix = created;
  run.program_hash = "fnv1a64:0123456789abcdef:42";
  return run;
}

StoredCall MakeCall(const std::string& key, const std::string& value) {
  StoredCall call;
  call.key = key;
  call.function = "summarize";
  call.outputs = {{"summary", value}, {"title", "T:" + value}};
  return call;
}

// Exercises every method once and checks what comes back.
void RoundTrip(RunStore& store) {
  StoredRun run = MakeRun("r1", 1700000000.5);
  REQUIRE(store.CreateRun(run).ok());

  Result<StoredRun> got = store.GetRun("r1");
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(got->id == "r1");
  CHECK(got->program == run.program);
  CHECK(got->args == run.args);
  CHECK(got->status == "running");
  CHECK(got->error.empty());
  CHECK(got->created_unix == doctest::Approx(1700000000.5));
  CHECK(got->program_hash == run.program_hash);

  StoredCall a = MakeCall("main#0#summarize#abc", "first");
  StoredCall b = MakeCall("main#1#summarize#def", "second");
  StoredCall none;  // a call with no outputs at all
  none.key = "main#2#noop#000";
  none.function = "noop";
  REQUIRE(store.RecordCall("r1", a).ok());
  REQUIRE(store.RecordCall("r1", b).ok());
  REQUIRE(store.RecordCall("r1", none).ok());

  Result<std::optional<StoredCall>> found = store.FindCall("r1", b.key);
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK((*found)->key == b.key);
  CHECK((*found)->function == "summarize");
  CHECK((*found)->outputs == b.outputs);

  Result<std::vector<StoredCall>> calls = store.Calls("r1");
  REQUIRE(calls.ok());
  REQUIRE(calls->size() == 3);
  CHECK((*calls)[0].key == a.key);  // recording order
  CHECK((*calls)[0].outputs == a.outputs);
  CHECK((*calls)[1].key == b.key);
  CHECK((*calls)[2].key == none.key);
  CHECK((*calls)[2].function == "noop");
  CHECK((*calls)[2].outputs.empty());

  REQUIRE(store.RecordValue("r1", "os.time#0", "1700000001").ok());
  Result<std::optional<std::string>> value = store.FindValue("r1", "os.time#0");
  REQUIRE(value.ok());
  REQUIRE(value->has_value());
  CHECK(**value == "1700000001");

  REQUIRE(store.AppendEvent("r1", "run_started", "{}").ok());
  REQUIRE(store.AppendEvent("r1", "node_finished", "{\"key\":\"main#0\"}").ok());

  REQUIRE(store.FinishRun("r1", "failed", "engine out of memory").ok());
  got = store.GetRun("r1");
  REQUIRE(got.ok());
  CHECK(got->status == "failed");
  CHECK(got->error == "engine out of memory");

  Result<std::vector<StoredRun>> runs = store.ListRuns(10);
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 1);
  CHECK((*runs)[0].id == "r1");
  CHECK((*runs)[0].args == run.args);
}

TEST_CASE("RunStore round trips every method in memory") {
  std::unique_ptr<RunStore> store = MustOpen(":memory:");
  RoundTrip(*store);
}

TEST_CASE("RunStore round trips every method in a file, and reopening keeps everything") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("runs.db");
  {
    Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);  // the public entry point
    REQUIRE_MESSAGE(store.ok(), store.status().ToString());
    RoundTrip(**store);
  }
  CHECK(RawQuery(path, "PRAGMA journal_mode") == "wal");
  CHECK(RawQuery(path, "PRAGMA user_version") == "5");
  CHECK(RawQuery(path, "PRAGMA integrity_check") == "ok");

  {
    std::unique_ptr<RunStore> store = MustOpen(path);
    Result<StoredRun> run = store->GetRun("r1");
    REQUIRE(run.ok());
    CHECK(run->status == "failed");
    CHECK(run->error == "engine out of memory");
    CHECK(run->args == MakeRun("r1").args);
    Result<std::vector<StoredCall>> calls = store->Calls("r1");
    REQUIRE(calls.ok());
    REQUIRE(calls->size() == 3);
    CHECK((*calls)[0].outputs == MakeCall("x", "first").outputs);
    CHECK((*calls)[1].outputs == MakeCall("x", "second").outputs);
    Result<std::optional<std::string>> value = store->FindValue("r1", "os.time#0");
    REQUIRE(value.ok());
    CHECK(value->value_or("") == "1700000001");
  }
  // Its own connection, after the store closed (an open store holds the file).
  CHECK(RawQuery(path,
                 "SELECT group_concat(kind, ',') FROM "
                 "(SELECT kind FROM events WHERE run_id = 'r1' ORDER BY seq)") ==
        "run_started,node_finished");
  std::unique_ptr<RunStore> store = MustOpen(path);
  // Recording continues after a reopen, after the calls already there.
  REQUIRE(store->RecordCall("r1", MakeCall("main#3#summarize#ghi", "fourth")).ok());
  Result<std::vector<StoredCall>> calls = store->Calls("r1");
  REQUIRE(calls.ok());
  REQUIRE(calls->size() == 4);
  CHECK(calls->back().key == "main#3#summarize#ghi");
}

TEST_CASE("RunStore migrates a version 1 file: its runs stay, with an empty program_hash") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("v1.db");
  {
    std::unique_ptr<RunStore> store = MustOpen(path);
    REQUIRE(store->CreateRun(MakeRun("old")).ok());
    REQUIRE(store->RecordCall("old", MakeCall("main#0#f#h", "kept")).ok());
  }
  // Back to what version 1 wrote.
  REQUIRE(RawExec(path,
                  "ALTER TABLE runs DROP COLUMN program_hash; ALTER TABLE runs DROP COLUMN owner; "
                  "ALTER TABLE runs DROP COLUMN attempts; PRAGMA user_version = 1") == "ok");
  std::unique_ptr<RunStore> store = MustOpen(path);
  Result<StoredRun> old = store->GetRun("old");
  REQUIRE(old.ok());
  CHECK(old->program == MakeRun("old").program);
  CHECK(old->program_hash.empty());
  Result<std::vector<StoredCall>> calls = store->Calls("old");
  REQUIRE(calls.ok());
  REQUIRE(calls->size() == 1);
  CHECK(calls->front().outputs == MakeCall("x", "kept").outputs);
  REQUIRE(store->CreateRun(MakeRun("new")).ok());
  CHECK(store->GetRun("new")->program_hash == MakeRun("new").program_hash);
  store.reset();
  CHECK(RawQuery(path, "PRAGMA user_version") == "5");
}

TEST_CASE("RunStore keeps each run's owner and lists the runs of one owner") {
  double now = 1000;
  SqliteRunStoreOptions options;
  options.clock = [&now] { return now; };
  std::unique_ptr<RunStore> store = MustOpen(":memory:", options);
  auto owned = [](const std::string& id, const std::string& owner, double created) {
    StoredRun run = MakeRun(id, created);
    run.owner = owner;
    return run;
  };
  REQUIRE(store->CreateRun(owned("a1", "alice", 10)).ok());
  REQUIRE(store->CreateRun(owned("b1", "bob", 20)).ok());
  REQUIRE(store->CreateRun(owned("a2", "alice", 30)).ok());
  REQUIRE(store->CreateRun(owned("local", "", 40)).ok());
  CHECK(store->GetRun("a1")->owner == "alice");
  CHECK(store->GetRun("local")->owner.empty());
  auto ids = [&](const std::string& owner, int limit) {
    std::vector<std::string> out;
    Result<std::vector<StoredRun>> runs = store->ListRunsOf(owner, limit);
    REQUIRE(runs.ok());
    for (const StoredRun& r : *runs) {
      CHECK(r.owner == owner);
      out.push_back(r.id);
    }
    return out;
  };
  CHECK(ids("alice", 0) == std::vector<std::string>{"a2", "a1"});
  CHECK(ids("alice", 1) == std::vector<std::string>{"a2"});  // the limit counts alice's runs
  CHECK(ids("bob", 0) == std::vector<std::string>{"b1"});
  CHECK(ids("", 0) == std::vector<std::string>{"local"});
  CHECK(ids("carol", 0).empty());
  CHECK(store->ListRuns(0)->size() == 4);
}

TEST_CASE("RunStore migrates a version 2 file: its runs stay, with no owner") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("v2.db");
  {
    std::unique_ptr<RunStore> store = MustOpen(path);
    REQUIRE(store->CreateRun(MakeRun("old")).ok());
  }
  // Back to what version 2 wrote.
  REQUIRE(RawExec(path,
                  "ALTER TABLE runs DROP COLUMN owner; ALTER TABLE runs DROP COLUMN attempts; "
                  "PRAGMA user_version = 2") == "ok");
  std::unique_ptr<RunStore> store = MustOpen(path);
  Result<StoredRun> old = store->GetRun("old");
  REQUIRE(old.ok());
  CHECK(old->owner.empty());
  CHECK(old->program_hash == MakeRun("old").program_hash);
  StoredRun fresh = MakeRun("new");
  fresh.owner = "alice";
  REQUIRE(store->CreateRun(fresh).ok());
  CHECK(store->GetRun("new")->owner == "alice");
  store.reset();
  CHECK(RawQuery(path, "PRAGMA user_version") == "5");
}

TEST_CASE("RunStore counts a run's attempts until a call is recorded; version 3 runs have 0") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("v3.db");
  {
    std::unique_ptr<RunStore> store = MustOpen(path);
    REQUIRE(store->CreateRun(MakeRun("old")).ok());
    CHECK(store->GetRun("old")->attempts == 0);
    CHECK(*store->AddAttempt("old") == 1);
  }
  // Back to what version 3 wrote.
  REQUIRE(RawExec(path, "ALTER TABLE runs DROP COLUMN attempts; PRAGMA user_version = 3") == "ok");
  std::unique_ptr<RunStore> store = MustOpen(path);
  CHECK(store->GetRun("old")->attempts == 0);
  CHECK(*store->AddAttempt("old") == 1);
  CHECK(*store->AddAttempt("old") == 2);
  CHECK(store->GetRun("old")->attempts == 2);
  Result<std::vector<StoredRun>> runs = store->ListRuns(0);
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 1);
  CHECK(runs->front().attempts == 2);
  CHECK(store->AddAttempt("nope").status().code() == StatusCode::kNotFound);
  // A recorded call is progress: the count starts again.
  REQUIRE(store->RecordCall("old", MakeCall("main#0#f#h", "progress")).ok());
  CHECK(store->GetRun("old")->attempts == 0);
  CHECK(*store->AddAttempt("old") == 1);
  store.reset();
  CHECK(RawQuery(path, "PRAGMA user_version") == "5");
}

TEST_CASE("RunStore lists runs newest first, ties in creation order, with a limit") {
  double now = 1000;
  SqliteRunStoreOptions options;
  options.clock = [&now] { return now; };
  std::unique_ptr<RunStore> store = MustOpen(":memory:", options);
  REQUIRE(store->CreateRun(MakeRun("old", 10)).ok());
  REQUIRE(store->CreateRun(MakeRun("newest", 30)).ok());
  REQUIRE(store->CreateRun(MakeRun("mid", 20)).ok());
  REQUIRE(store->CreateRun(MakeRun("tie-a", 25)).ok());
  REQUIRE(store->CreateRun(MakeRun("tie-b", 25)).ok());   // same second, created later
  REQUIRE(store->CreateRun(MakeRun("stamped", 0)).ok());  // 0: stamped with the clock

  Result<std::vector<StoredRun>> all = store->ListRuns(0);  // <= 0: no limit
  REQUIRE(all.ok());
  std::vector<std::string> ids;
  for (const StoredRun& r : *all) ids.push_back(r.id);
  CHECK(ids == std::vector<std::string>{"stamped", "newest", "tie-b", "tie-a", "mid", "old"});
  CHECK((*all)[0].created_unix == doctest::Approx(1000));

  Result<std::vector<StoredRun>> two = store->ListRuns(2);
  REQUIRE(two.ok());
  REQUIRE(two->size() == 2);
  CHECK((*two)[0].id == "stamped");
  CHECK((*two)[1].id == "newest");

  Result<std::vector<StoredRun>> empty = MustOpen(":memory:")->ListRuns(5);
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("RunStore misses: FindCall and FindValue give nullopt for an unknown key") {
  std::unique_ptr<RunStore> store = MustOpen(":memory:");
  REQUIRE(store->CreateRun(MakeRun("r")).ok());
  REQUIRE(store->RecordCall("r", MakeCall("k1", "v")).ok());
  Result<std::optional<StoredCall>> call = store->FindCall("r", "k2");
  REQUIRE(call.ok());
  CHECK(!call->has_value());
  Result<std::optional<std::string>> value =
      store->FindValue("r", "k1");  // a call key, not a value
  REQUIRE(value.ok());
  CHECK(!value->has_value());
  // A call of one run is not found under another.
  REQUIRE(store->CreateRun(MakeRun("other")).ok());
  call = store->FindCall("other", "k1");
  REQUIRE(call.ok());
  CHECK(!call->has_value());
  Result<std::vector<StoredCall>> calls = store->Calls("other");
  REQUIRE(calls.ok());
  CHECK(calls->empty());
}

TEST_CASE("RunStore: every run-scoped method reports NotFound for an unknown run") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("runs.db");
  std::unique_ptr<RunStore> store = MustOpen(path);
  REQUIRE(store->CreateRun(MakeRun("known")).ok());
  auto check_not_found = [&](const Status& s, const char* method) {
    INFO(method);
    CHECK(s.code() == StatusCode::kNotFound);
    CHECK(s.message().find(path) != std::string::npos);
    CHECK(s.message().find("'ghost'") != std::string::npos);
  };
  check_not_found(store->GetRun("ghost").status(), "GetRun");
  check_not_found(store->FinishRun("ghost", "done", ""), "FinishRun");
  check_not_found(store->RecordCall("ghost", MakeCall("k", "v")), "RecordCall");
  check_not_found(store->FindCall("ghost", "k").status(), "FindCall");
  check_not_found(store->Calls("ghost").status(), "Calls");
  check_not_found(store->RecordValue("ghost", "k", "v"), "RecordValue");
  check_not_found(store->FindValue("ghost", "k").status(), "FindValue");
  check_not_found(store->AppendEvent("ghost", "run_started", ""), "AppendEvent");
  store.reset();  // the store holds the file while open
  // Nothing was written for the unknown run.
  CHECK(RawQuery(path,
                 "SELECT (SELECT count(*) FROM calls) + (SELECT count(*) FROM host_values)"
                 " + (SELECT count(*) FROM events)") == "0");
}

TEST_CASE("RunStore rejects bad arguments and conflicting records") {
  std::unique_ptr<RunStore> store = MustOpen(":memory:");
  CHECK(store->CreateRun(MakeRun("")).code() == StatusCode::kInvalidArgument);
  StoredRun bad = MakeRun("bad");
  bad.status = "paused";
  CHECK(store->CreateRun(bad).code() == StatusCode::kInvalidArgument);

  REQUIRE(store->CreateRun(MakeRun("r")).ok());
  Status dup = store->CreateRun(MakeRun("r"));
  CHECK(dup.code() == StatusCode::kInvalidArgument);
  CHECK(dup.message().find("already exists") != std::string::npos);
  CHECK(store->FinishRun("r", "finished", "").code() == StatusCode::kInvalidArgument);
  CHECK(store->RecordCall("r", MakeCall("", "v")).code() == StatusCode::kInvalidArgument);
  CHECK(store->RecordValue("r", "", "v").code() == StatusCode::kInvalidArgument);
  CHECK(store->AppendEvent("r", "", "x").code() == StatusCode::kInvalidArgument);

  // The same call again is accepted (an idempotent retry); other outputs are not.
  REQUIRE(store->RecordCall("r", MakeCall("k", "v")).ok());
  CHECK(store->RecordCall("r", MakeCall("k", "v")).ok());
  Status conflict = store->RecordCall("r", MakeCall("k", "changed"));
  CHECK(conflict.code() == StatusCode::kInvalidArgument);
  CHECK(conflict.message().find("'k'") != std::string::npos);
  Result<std::vector<StoredCall>> calls = store->Calls("r");
  REQUIRE(calls.ok());
  REQUIRE(calls->size() == 1);
  CHECK(calls->front().outputs == MakeCall("k", "v").outputs);

  REQUIRE(store->RecordValue("r", "rand#0", "4").ok());
  CHECK(store->RecordValue("r", "rand#0", "4").ok());
  CHECK(store->RecordValue("r", "rand#0", "5").code() == StatusCode::kInvalidArgument);

  // A resumed run goes back to running and then finishes.
  CHECK(store->FinishRun("r", "running", "").ok());
  CHECK(store->FinishRun("r", "done", "").ok());
  Result<StoredRun> run = store->GetRun("r");
  REQUIRE(run.ok());
  CHECK(run->status == "done");
}

TEST_CASE("RunStore: buffered values are written with the run's next call or end") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("runs.db");
  auto value_of = [&](const std::string& run, const std::string& key) {
    return RawQuery(path,
                    "SELECT COUNT(*) || ':' || COALESCE(MAX(value), '') FROM host_values "
                    "WHERE run_id = '" +
                        run + "' AND key = '" + key + "'");
  };
  // A process killed without closing the store (as _exit does) keeps the
  // values written with a call, a finish or a full batch, and only those.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
    if (!store.ok()) _exit(10);
    RunStore& s = **store;
    bool ok = s.CreateRun(MakeRun("call")).ok() && s.CreateRun(MakeRun("end")).ok() &&
              s.CreateRun(MakeRun("batch")).ok() && s.CreateRun(MakeRun("none")).ok();
    ok = ok && s.BufferValue("call", "now#0", "1").ok() && s.BufferValue("call", "now#1", "2").ok();
    ok = ok && s.RecordCall("call", MakeCall("k", "v")).ok();
    ok = ok && s.BufferValue("call", "now#2", "3").ok();  // after the call: lost
    ok = ok && s.BufferValue("end", "now#0", "1").ok() && s.FinishRun("end", "done", "").ok();
    for (size_t i = 0; ok && i < RunStore::kValueBatch; ++i)
      ok = s.BufferValue("batch", "now#" + std::to_string(i), std::to_string(i)).ok();
    ok = ok && s.BufferValue("none", "now#0", "1").ok();
    // Seen by the process that buffered them.
    auto found = s.FindValue("call", "now#2");
    ok = ok && found.ok() && *found == std::optional<std::string>("3");
    _exit(ok ? 0 : 11);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(value_of("call", "now#0") == "1:1");
  CHECK(value_of("call", "now#1") == "1:2");
  CHECK(value_of("call", "now#2") == "0:");
  CHECK(value_of("end", "now#0") == "1:1");
  CHECK(RawQuery(path, "SELECT COUNT(*) FROM host_values WHERE run_id = 'batch'") ==
        std::to_string(RunStore::kValueBatch));
  CHECK(value_of("none", "now#0") == "0:");

  // Closing the store writes what is buffered; the rule of RecordValue
  // holds across the buffer and the file, and DeleteRun drops both.
  {
    std::unique_ptr<RunStore> store = MustOpen(path);
    REQUIRE(store->BufferValue("none", "now#0", "7").ok());  // the lost one: a fresh value
    CHECK(store->BufferValue("none", "now#0", "7").ok());
    CHECK(store->BufferValue("none", "now#0", "8").code() == StatusCode::kInvalidArgument);
    CHECK(store->RecordValue("none", "now#0", "8").code() == StatusCode::kInvalidArgument);
    CHECK(store->BufferValue("call", "now#0", "9").code() == StatusCode::kInvalidArgument);
    CHECK(store->BufferValue("call", "now#0", "1").ok());
    CHECK(store->BufferValue("ghost", "now#0", "1").code() == StatusCode::kNotFound);
    CHECK(store->BufferValue("none", "", "1").code() == StatusCode::kInvalidArgument);
    REQUIRE(store->BufferValue("end", "now#1", "2").ok());
    REQUIRE(store->DeleteRun("end").ok());
    CHECK(store->FindValue("end", "now#1").status().code() == StatusCode::kNotFound);
  }
  CHECK(value_of("none", "now#0") == "1:7");
  CHECK(RawQuery(path, "SELECT COUNT(*) FROM host_values WHERE run_id = 'end'") == "0");
}

TEST_CASE("RunStore keeps values byte for byte: NULs, invalid UTF-8, empty and large") {
  std::unique_ptr<RunStore> store = MustOpen(":memory:");
  const std::string nul("a\0b\0", 4);
  const std::string bad_utf8 = "\xff\xfe\xc3(";
  std::string large(1 << 20, 'x');
  for (size_t i = 0; i < large.size(); i += 97) large[i] = static_cast<char>(i % 251);

  StoredRun run = MakeRun("r");
  run.args = {nul, bad_utf8, ""};
  REQUIRE(store->CreateRun(run).ok());
  StoredCall call;
  call.key = "k" + nul;
  call.function = bad_utf8;
  call.outputs = {{"", ""}, {"nul", nul}, {"utf8", bad_utf8}, {"large", large}};
  REQUIRE(store->RecordCall("r", call).ok());
  REQUIRE(store->RecordValue("r", nul, large).ok());

  Result<StoredRun> got_run = store->GetRun("r");
  REQUIRE(got_run.ok());
  CHECK(got_run->args == run.args);
  Result<std::optional<StoredCall>> got = store->FindCall("r", call.key);
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->function == bad_utf8);
  CHECK((*got)->outputs == call.outputs);
  // A key that differs only after the NUL is a different key.
  Result<std::optional<StoredCall>> miss = store->FindCall("r", "k");
  REQUIRE(miss.ok());
  CHECK(!miss->has_value());
  Result<std::vector<StoredCall>> calls = store->Calls("r");
  REQUIRE(calls.ok());
  REQUIRE(calls->size() == 1);
  CHECK(calls->front().outputs == call.outputs);
  Result<std::optional<std::string>> value = store->FindValue("r", nul);
  REQUIRE(value.ok());
  CHECK(value->value_or("") == large);
}

// Writers on one store from several threads (serialized by its mutex) all
// succeed; a second store on the same file, while the first is open, is
// refused with an error saying the store is in use (the first holds the file:
// locking_mode=EXCLUSIVE), and opens once the first closed.
TEST_CASE("RunStore: concurrent writers from several threads; one process holds the file") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("runs.db");
  std::unique_ptr<RunStore> first = MustOpen(path);
  SqliteRunStoreOptions quick;
  quick.busy_timeout_ms = 50;
  {
    Result<std::unique_ptr<RunStore>> other = OpenSqliteRunStore(path, quick);
    REQUIRE_FALSE(other.ok());
    CHECK(other.status().code() == StatusCode::kIoError);
    CHECK(other.status().message() ==
          path +
              ": the run store is in use by another process (it holds the store while open); "
              "wait for it to finish or use another store file");
  }
  RunStore* second = first.get();
  REQUIRE(first->CreateRun(MakeRun("shared")).ok());

  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 25;
  std::atomic<int> failures{0};
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RunStore& store = (t % 2 == 0) ? *first : *second;
      const std::string own = "run-" + std::to_string(t);
      auto fail = [&](const Status& s) {
        if (s.ok()) return false;
        ++failures;
        errors[t] = s.ToString();
        return true;
      };
      if (fail(store.CreateRun(MakeRun(own)))) return;
      for (int i = 0; i < kCallsPerThread; ++i) {
        const std::string key = "t" + std::to_string(t) + "#" + std::to_string(i);
        if (fail(store.RecordCall(own, MakeCall(key, own)))) return;
        if (fail(store.RecordCall("shared", MakeCall(key, "shared")))) return;
        if (fail(store.RecordValue(own, key, std::to_string(i)))) return;
        if (fail(store.AppendEvent("shared", "node_finished", key))) return;
        Result<std::optional<StoredCall>> read = store.FindCall("shared", key);
        if (fail(read.status())) return;
        if (!read->has_value()) fail(Status::Internal("own write not visible: " + key));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& e : errors) CHECK_MESSAGE(e.empty(), e);
  REQUIRE(failures.load() == 0);

  Result<std::vector<StoredCall>> shared = first->Calls("shared");
  REQUIRE(shared.ok());
  CHECK(shared->size() == kThreads * kCallsPerThread);
  for (int t = 0; t < kThreads; ++t) {
    Result<std::vector<StoredCall>> own = second->Calls("run-" + std::to_string(t));
    REQUIRE(own.ok());
    CHECK(own->size() == kCallsPerThread);
  }
  first.reset();
  CHECK(MustOpen(path, quick)->GetRun("shared").ok());
  CHECK(RawQuery(path, "SELECT count(*) FROM events") ==
        std::to_string(kThreads * kCallsPerThread));
  // Ordinals within the shared run are 0..n-1 with no gaps or repeats.
  CHECK(RawQuery(path,
                 "SELECT count(DISTINCT ordinal) = count(*) AND min(ordinal) = 0 AND "
                 "max(ordinal) = count(*) - 1 FROM calls WHERE run_id = 'shared'") == "1");
  CHECK(RawQuery(path, "PRAGMA integrity_check") == "ok");
}

// The WAL index lives in the process's heap, not in a mmapped -shm file:
// truncating a -shm file (what killed a writer with SIGBUS on its next
// access) cannot touch the store. The writer runs in a child, so a SIGBUS
// would show as its exit status rather than end the test binary.
TEST_CASE("RunStore: no -shm file is mapped; truncating one mid-run is harmless") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("runs.db");
  const std::string shm = path + "-shm";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
    if (!store.ok() || !(*store)->CreateRun(MakeRun("r")).ok()) _exit(10);
    if (!(*store)->RecordCall("r", MakeCall("a", "before")).ok()) _exit(11);
    if (std::filesystem::exists(shm)) _exit(12);
    std::ofstream(shm, std::ios::binary) << std::string(65536, 'x');  // a stale one, then cut
    if (truncate(shm.c_str(), 0) != 0) _exit(13);
    for (int i = 0; i < 20; ++i)
      if (!(*store)->RecordCall("r", MakeCall("b" + std::to_string(i), "after")).ok()) _exit(14);
    _exit(0);
  }
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  REQUIRE_MESSAGE(WIFEXITED(wstatus), "child died of signal " << WTERMSIG(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  std::unique_ptr<RunStore> store = MustOpen(path);
  Result<std::vector<StoredCall>> calls = store->Calls("r");
  REQUIRE(calls.ok());
  CHECK(calls->size() == 21);
}

// A store that fails PRAGMA quick_check is refused at Open with a Corruption
// naming the path and the check's finding, and the file is left byte for
// byte as it was (for recovery).
TEST_CASE("RunStore: a store failing quick_check is refused and left untouched") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("damaged.db");
  {
    std::unique_ptr<RunStore> store = MustOpen(path);
    REQUIRE(store->CreateRun(MakeRun("r")).ok());
    for (int i = 0; i < 200; ++i)
      REQUIRE(
          store->RecordCall("r", MakeCall("k" + std::to_string(i), std::string(300, 'v'))).ok());
  }  // the last close checkpoints the WAL into the main file
  auto read_all = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  std::string bytes = read_all();
  REQUIRE(bytes.size() > 16 * 4096);
  // One leaf page in the middle: its cell count (header bytes 3-4) made
  // larger than the page can hold. Opening and reading page 1 still work.
  const size_t page = (bytes.size() / 4096 / 2) * 4096;
  REQUIRE(
      (bytes[page] == 0x0d || bytes[page] == 0x0a || bytes[page] == 0x02 || bytes[page] == 0x05));
  bytes[page + 3] = static_cast<char>(0x7f);
  bytes[page + 4] = static_cast<char>(0xff);
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }

  Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == StatusCode::kCorruption);
  CHECK(store.status().message().find(path + ": ") == 0);
  CHECK(store.status().message().find("the run store is damaged (quick_check: ") !=
        std::string::npos);
  CHECK(read_all() == bytes);
  CHECK_FALSE(std::filesystem::exists(path + "-wal"));
}

TEST_CASE("RunStore: a file of random bytes is reported as corrupt, naming the path") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("garbage.db");
  {
    std::mt19937 rng(42);
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 64 * 1024; ++i) out.put(static_cast<char>(rng() & 0xff));
  }
  Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
  REQUIRE(!store.ok());
  CHECK(store.status().code() == StatusCode::kCorruption);
  CHECK(store.status().message().find(path) != std::string::npos);
  CHECK(store.status().message().find("file is not a database") != std::string::npos);
}

TEST_CASE("RunStore: damaged table pages give Corruption, not a crash") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("damaged.db");
  {
    std::unique_ptr<RunStore> store = MustOpen(path);
    REQUIRE(store->CreateRun(MakeRun("r")).ok());
    for (int i = 0; i < 200; ++i) {
      REQUIRE(
          store->RecordCall("r", MakeCall("k" + std::to_string(i), std::string(300, 'v'))).ok());
    }
  }  // the last close checkpoints the WAL into the main file
  {
    // Keep page 1 (header and schema) and overwrite every later page.
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    file.seekg(0, std::ios::end);
    const std::streamoff size = file.tellg();
    REQUIRE(size > 8 * 4096);
    std::mt19937 rng(7);
    file.seekp(4096);
    for (std::streamoff i = 4096; i < size; ++i) file.put(static_cast<char>(rng() & 0xff));
  }
  Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
  Status s = store.ok() ? (*store)->Calls("r").status() : store.status();
  CHECK(s.code() == StatusCode::kCorruption);
  CHECK(s.message().find(path) != std::string::npos);
}

TEST_CASE("RunStore refuses other databases, newer schemas and unusable paths") {
  TempDir dir;
  REQUIRE(dir.ok());
  SUBCASE("another application's SQLite file") {
    const std::string path = dir.File("other.db");
    CHECK(RawExec(path, "CREATE TABLE t (x)") == "ok");
    Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
    REQUIRE(!store.ok());
    CHECK(store.status().code() == StatusCode::kInvalidArgument);
    CHECK(store.status().message().find("not a Braid run store") != std::string::npos);
    CHECK(RawQuery(path, "SELECT count(*) FROM sqlite_schema") == "1");  // left untouched
  }
  SUBCASE("a schema newer than this build") {
    const std::string path = dir.File("newer.db");
    { MustOpen(path); }
    CHECK(RawExec(path, "PRAGMA user_version = 99") == "ok");
    Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
    REQUIRE(!store.ok());
    CHECK(store.status().code() == StatusCode::kUnsupported);
    CHECK(store.status().message().find("99") != std::string::npos);
  }
  SUBCASE("a path in a missing directory") {
    const std::string path = dir.File("missing/runs.db");
    Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
    REQUIRE(!store.ok());
    CHECK(store.status().code() == StatusCode::kIoError);
    CHECK(store.status().message().find(path) != std::string::npos);
    CHECK(store.status().message().find("unable to open") != std::string::npos);
  }
  SUBCASE("an empty path") {
    Result<std::unique_ptr<RunStore>> store = RunStore::Open("");
    REQUIRE(!store.ok());
    CHECK(store.status().code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("RunStore totals from the node events, and deleting a run takes everything of it") {
  double now = 500;
  SqliteRunStoreOptions options;
  options.clock = [&now] { return now; };
  std::unique_ptr<RunStore> store = MustOpen(":memory:", options);
  REQUIRE(store->CreateRun(MakeRun("a", 100)).ok());
  REQUIRE(store->CreateRun(MakeRun("b", 200)).ok());
  REQUIRE(store->AppendEvent("a", "run_started", "{}").ok());
  REQUIRE(store->AppendEvent("a", "node_started", R"({"node":1,"prompt_tokens":9})").ok());
  REQUIRE(
      store
          ->AppendEvent("a", "node_finished",
                        R"({"node":1,"prompt_tokens":10,"cached_tokens":4,"generated_tokens":20})")
          .ok());
  REQUIRE(
      store
          ->AppendEvent("a", "node_finished",
                        R"({"node":2,"prompt_tokens":5,"cached_tokens":0,"generated_tokens":7})")
          .ok());
  REQUIRE(store->AppendEvent("a", "node_failed", R"({"node":3,"prompt_tokens":1})").ok());
  REQUIRE(store->AppendEvent("a", "node_finished", "not json").ok());  // counted nowhere
  StoredCall call;
  call.key = "k";
  call.function = "f";
  call.outputs = {{"out", "v"}};
  REQUIRE(store->RecordCall("a", call).ok());
  REQUIRE(store->RecordValue("a", "time", "1").ok());

  Result<RunTotals> t = store->Totals("a");
  REQUIRE(t.ok());
  CHECK(t->finished_unix == 0);  // still "running"
  CHECK(t->nodes_done == 2);
  CHECK(t->nodes_failed == 1);
  CHECK(t->prompt_tokens == 16);
  CHECK(t->cached_tokens == 4);
  CHECK(t->generated_tokens == 27);
  now = 600;
  REQUIRE(store->FinishRun("a", "done", "").ok());
  CHECK(store->Totals("a")->finished_unix == doctest::Approx(600));
  Result<RunTotals> empty = store->Totals("b");
  REQUIRE(empty.ok());
  CHECK(empty->nodes_done == 0);
  CHECK(empty->prompt_tokens == 0);
  CHECK(store->Totals("nope").status().code() == StatusCode::kNotFound);

  REQUIRE(store->DeleteRun("a").ok());
  CHECK(store->GetRun("a").status().code() == StatusCode::kNotFound);
  CHECK(store->Totals("a").status().code() == StatusCode::kNotFound);
  // Recreated with the same id: none of the old calls, values or events remain.
  REQUIRE(store->CreateRun(MakeRun("a", 700)).ok());
  CHECK(store->Calls("a")->empty());
  CHECK(!store->FindValue("a", "time")->has_value());
  CHECK(store->Totals("a")->nodes_done == 0);
  CHECK(store->GetRun("b").ok());  // the other run untouched
  CHECK(store->DeleteRun("nope").code() == StatusCode::kNotFound);
}

TEST_CASE("RunStore: version 4 migrates to 5 keeping every row; 'cancelled' is a status") {
  TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("runs.db");
  {
    std::unique_ptr<RunStore> store = MustOpen(path);
    REQUIRE(store->CreateRun(MakeRun("kept")).ok());
    REQUIRE(store->RecordCall("kept", MakeCall("main#0#f#h", "a value")).ok());
  }
  // Back to the version 4 table, whose CHECK has no 'cancelled'.
  REQUIRE(RawExec(path,
                  "PRAGMA foreign_keys = OFF;"
                  "CREATE TABLE old_runs (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,"
                  " program TEXT NOT NULL, status TEXT NOT NULL CHECK (status IN ('running',"
                  " 'done', 'failed')), error TEXT NOT NULL DEFAULT '', created_unix REAL NOT"
                  " NULL, finished_unix REAL, program_hash TEXT NOT NULL DEFAULT '', owner TEXT"
                  " NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0);"
                  "INSERT INTO old_runs SELECT * FROM runs; DROP TABLE runs;"
                  "ALTER TABLE old_runs RENAME TO runs; PRAGMA user_version = 4") == "ok");
  CHECK(RawExec(path, "UPDATE runs SET status = 'cancelled'") != "ok");
  std::unique_ptr<RunStore> store = MustOpen(path);
  auto calls = store->Calls("kept");
  REQUIRE(calls.ok());
  REQUIRE(calls->size() == 1);  // the children survived the table's remaking
  CHECK(calls->front().outputs.at("summary") == "a value");
  REQUIRE(store->FinishRun("kept", "cancelled", "cancelled by its client").ok());
  CHECK(store->GetRun("kept")->status == "cancelled");
  // The remade table is still the calls' parent: deleting the run deletes them.
  REQUIRE(store->DeleteRun("kept").ok());
  store.reset();
  CHECK(RawQuery(path, "SELECT count(*) FROM calls") == "0");
  CHECK(RawQuery(path, "PRAGMA user_version") == "5");
}

TEST_CASE("RunStore totals: the time between a run's processes is paused time") {
  double now = 1000;
  SqliteRunStoreOptions options;
  options.clock = [&now] { return now; };
  std::unique_ptr<RunStore> store = MustOpen(":memory:", options);
  REQUIRE(store->CreateRun(MakeRun("r", 1000)).ok());
  REQUIRE(store->AppendEvent("r", "run_started", "{}").ok());
  now = 1005;
  REQUIRE(store->AppendEvent("r", "node_finished", "{}").ok());  // then killed
  CHECK(store->Totals("r")->paused_seconds == 0);
  now = 1100;
  REQUIRE(store->AppendEvent("r", "run_resumed", "{}").ok());
  now = 1110;
  REQUIRE(store->AppendEvent("r", "node_finished", "{}").ok());
  REQUIRE(store->FinishRun("r", "done", "").ok());
  Result<RunTotals> t = store->Totals("r");
  REQUIRE(t.ok());
  CHECK(t->paused_seconds == doctest::Approx(95));
  CHECK(t->finished_unix - 1000 - t->paused_seconds == doctest::Approx(15));
}

}  // namespace
}  // namespace braid::rt
