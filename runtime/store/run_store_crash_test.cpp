// Crash safety: a child process records calls and reports each one through a
// pipe only after RecordCall returned; the parent kills it with SIGKILL at a
// random moment, reopens the file, and checks that every reported call is
// there, intact, and that SQLite's integrity check passes.
//
// SIGKILL loses the process but not the OS page cache, so this tests the
// transaction boundaries and WAL recovery, not power loss; that part rests on
// synchronous=FULL fsyncing the WAL at each commit.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <thread>

#include "store/run_store.h"
#include "store_test_util.h"

namespace braid::rt {
namespace {

using testing::RawQuery;
using testing::TempDir;

constexpr int64_t kChildMaxCalls = 100000;  // far more than it gets to before the kill

std::string Key(int64_t i) { return "main#" + std::to_string(i) + "#summarize#h"; }

StoredCall CallFor(int64_t i) {
  StoredCall call;
  call.key = Key(i);
  call.function = "summarize";
  // Several outputs, one spanning pages, so a torn write would show.
  call.outputs = {{"summary", "summary of chunk " + std::to_string(i)},
                  {"big", std::string(3000 + (i % 7) * 1000, static_cast<char>('a' + i % 26))},
                  {"index", std::to_string(i)}};
  return call;
}

void WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n <= 0) _exit(3);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// The child: opens the store, creates the run, records calls in order and
// reports each index after RecordCall returned. Never returns.
[[noreturn]] void ChildRecords(const std::string& path, int fd) {
  Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
  if (!store.ok()) _exit(10);
  if (!(*store)->CreateRun(StoredRun{"crash", "crash.lua", {}, "running", "", 0, ""}).ok())
    _exit(11);
  for (int64_t i = 0; i < kChildMaxCalls; ++i) {
    if (!(*store)->RecordCall("crash", CallFor(i)).ok()) _exit(12);
    WriteAll(fd, &i, sizeof(i));
  }
  _exit(0);
}

TEST_CASE("RunStore: every acknowledged call survives SIGKILL at a random moment") {
  TempDir dir;
  REQUIRE(dir.ok());
  std::mt19937 rng(20240611);
  constexpr int kTrials = 20;
  int killed_mid_run = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    CAPTURE(trial);
    const std::string path = dir.File("crash_" + std::to_string(trial) + ".db");
    // Some trials kill before any acknowledgement (possibly during Open's
    // migration or CreateRun); the rest after a random number of calls, plus a
    // random delay so the kill lands at a random point of a transaction.
    const int64_t kill_after = std::uniform_int_distribution<int64_t>(0, 40)(rng) - 4;
    const int delay_us = std::uniform_int_distribution<int>(0, 4000)(rng);

    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      ChildRecords(path, fds[1]);
    }
    close(fds[1]);

    std::vector<int64_t> acked;
    auto read_acks = [&](size_t want) {  // reads until `want` acks or EOF
      while (acked.size() < want) {
        int64_t i = 0;
        size_t got = 0;
        while (got < sizeof(i)) {
          ssize_t n = read(fds[0], reinterpret_cast<char*>(&i) + got, sizeof(i) - got);
          if (n <= 0) return;
          got += static_cast<size_t>(n);
        }
        acked.push_back(i);
      }
    };
    if (kill_after > 0) read_acks(static_cast<size_t>(kill_after));
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    kill(pid, SIGKILL);
    read_acks(SIZE_MAX);  // what the child reported before it died
    close(fds[0]);
    int wstatus = 0;
    REQUIRE(waitpid(pid, &wstatus, 0) == pid);
    // Exiting on its own would mean an error in the child (codes 10-12).
    REQUIRE_MESSAGE(WIFSIGNALED(wstatus), "child exited with " << WEXITSTATUS(wstatus));
    CHECK(WTERMSIG(wstatus) == SIGKILL);
    if (!acked.empty()) ++killed_mid_run;

    // Acknowledgements arrive in order 0, 1, 2, ...
    for (size_t j = 0; j < acked.size(); ++j) REQUIRE(acked[j] == static_cast<int64_t>(j));

    // Open recovers the WAL and runs quick_check; it holds the file while
    // open, so the full checks run on their own connection after it closed.
    Result<std::vector<StoredCall>> calls = Status::Internal("not read");
    {
      Result<std::unique_ptr<RunStore>> store = RunStore::Open(path);
      REQUIRE_MESSAGE(store.ok(), store.status().ToString());
      calls = (*store)->Calls("crash");
    }
    CHECK(RawQuery(path, "PRAGMA integrity_check") == "ok");
    CHECK(RawQuery(path, "PRAGMA foreign_key_check") == "");
    if (!calls.ok()) {
      // Killed before CreateRun committed: then nothing can have been acknowledged.
      CHECK(calls.status().code() == StatusCode::kNotFound);
      CHECK(acked.empty());
      continue;
    }
    // Every acknowledged call is present; at most one more (committed but not
    // yet reported) may follow. Each present call is whole: all its outputs.
    REQUIRE(calls->size() >= acked.size());
    CHECK(calls->size() <= acked.size() + 1);
    for (size_t j = 0; j < calls->size(); ++j) {
      StoredCall want = CallFor(static_cast<int64_t>(j));
      CHECK((*calls)[j].key == want.key);
      CHECK((*calls)[j].outputs == want.outputs);
    }
  }
  MESSAGE(killed_mid_run << " of " << kTrials
                         << " trials were killed after at least one acknowledged call");
  CHECK(killed_mid_run >= kTrials / 2);
}

}  // namespace
}  // namespace braid::rt
