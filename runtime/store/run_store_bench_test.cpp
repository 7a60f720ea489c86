// Benchmark (skipped by default; timings belong in benchmarks, not tests):
// the cost of one RecordCall with synchronous=FULL, the setting RunStore::Open
// uses, against synchronous=NORMAL and an in-memory database.
//
// Run:  runtime_store_tests -tc='bench*' --no-skip
// Set BRAID_STORE_BENCH_DIR to put the file on the disk you care about (the
// default is the system temp dir); fsync cost depends entirely on that disk.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "sqlite_run_store.h"
#include "store_test_util.h"

namespace braid::rt {
namespace {

// A durable record must cost little next to the semantic call it records
// (tens to hundreds of milliseconds of decoding): 5 ms is the budget.
constexpr double kLimitUs = 5000;
constexpr int kCalls = 500;

struct Timing {
  double mean_us, p50_us, p99_us;
};

Timing Measure(const std::string& path, bool sync_full) {
  SqliteRunStoreOptions options;
  options.sync_full = sync_full;
  Result<std::unique_ptr<RunStore>> store = OpenSqliteRunStore(path, options);
  REQUIRE_MESSAGE(store.ok(), store.status().ToString());
  REQUIRE((*store)->CreateRun(StoredRun{"bench", "bench.lua", {}, "running", "", 0, ""}).ok());
  std::vector<double> us;
  us.reserve(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    StoredCall call;
    call.key = "main#" + std::to_string(i) + "#summarize#0123456789abcdef";
    call.function = "summarize";
    call.outputs = {{"summary", std::string(600, 's')}, {"title", "a short title"}};
    auto start = std::chrono::steady_clock::now();
    Status s = (*store)->RecordCall("bench", call);
    auto end = std::chrono::steady_clock::now();
    REQUIRE(s.ok());
    us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  double sum = 0;
  for (double u : us) sum += u;
  std::sort(us.begin(), us.end());
  return {sum / kCalls, us[kCalls / 2], us[kCalls * 99 / 100]};
}

TEST_CASE("bench: RecordCall cost per synchronous setting" * doctest::skip()) {
  testing::TempDir tmp;
  REQUIRE(tmp.ok());
  const char* env = std::getenv("BRAID_STORE_BENCH_DIR");
  const std::string dir = env != nullptr ? env : tmp.File("");
  const std::string full_path = (std::filesystem::path(dir) / "bench_full.db").string();
  const std::string normal_path = (std::filesystem::path(dir) / "bench_normal.db").string();
  for (const std::string& p : {full_path, normal_path}) {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::error_code ec;
      std::filesystem::remove(p + suffix, ec);
    }
  }

  Timing full = Measure(full_path, true);
  Timing normal = Measure(normal_path, false);
  Timing memory = Measure(":memory:", true);
  std::printf("RecordCall, %d calls of 2 outputs (~0.6 KB), in %s\n", kCalls, dir.c_str());
  std::printf("  synchronous=FULL   mean %8.1f us  p50 %8.1f us  p99 %8.1f us  (limit %.0f us)\n",
              full.mean_us, full.p50_us, full.p99_us, kLimitUs);
  std::printf("  synchronous=NORMAL mean %8.1f us  p50 %8.1f us  p99 %8.1f us\n", normal.mean_us,
              normal.p50_us, normal.p99_us);
  std::printf("  :memory:           mean %8.1f us  p50 %8.1f us  p99 %8.1f us\n", memory.mean_us,
              memory.p50_us, memory.p99_us);
  CHECK(full.mean_us < kLimitUs);
  for (const std::string& p : {full_path, normal_path}) {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::error_code ec;
      std::filesystem::remove(p + suffix, ec);
    }
  }
}

}  // namespace
}  // namespace braid::rt
