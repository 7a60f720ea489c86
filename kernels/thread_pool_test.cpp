// ThreadPool: every index runs once per Run, writes are visible after Run and
// across Barrier, and the pool survives sleeping between Runs. Build with
// -fsanitize=thread to check the memory ordering.
#include "kernels/thread_pool.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/membw.h"
#include "kernels/stream.h"

namespace braid::kernels {
namespace {

TEST_CASE("Split covers [0, n) with aligned, ordered parts") {
  for (int64_t n : {0, 1, 5, 576, 1000, 49152}) {
    for (int parts : {1, 2, 3, 7}) {
      for (int64_t align : {1, 4, 32}) {
        int64_t prev_end = 0;
        for (int i = 0; i < parts; ++i) {
          int64_t b, e;
          ThreadPool::Split(n, parts, i, align, &b, &e);
          CHECK(b == prev_end);
          CHECK(e >= b);
          if (e < n) CHECK(e % align == 0);
          prev_end = e;
        }
        CHECK(prev_end == n);
      }
    }
  }
}

TEST_CASE("Run executes each thread index once, many times") {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    std::vector<int64_t> counts(threads, 0);  // plain ints: Run must order them
    for (int r = 0; r < 2000; ++r) {
      pool.Run([&](int i) { counts[i] += i + 1; });
    }
    for (int i = 0; i < threads; ++i) CHECK(counts[i] == 2000 * (i + 1));
  }
}

TEST_CASE("Barrier orders phases inside one Run") {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    const int kPhases = 200;
    std::vector<int64_t> slot(threads, 0);
    std::vector<int64_t> sums(kPhases, 0);
    pool.Run([&](int i) {
      for (int p = 0; p < kPhases; ++p) {
        slot[i] = static_cast<int64_t>(p) * 100 + i;  // phase p: everyone writes
        pool.Barrier();
        if (i == p % threads) {                      // one thread reads all slots
          int64_t s = 0;
          for (int j = 0; j < threads; ++j) s += slot[j];
          sums[p] = s;
        }
        pool.Barrier();  // nobody overwrites before the read finished
      }
    });
    for (int p = 0; p < kPhases; ++p) {
      CHECK(sums[p] == static_cast<int64_t>(p) * 100 * threads + threads * (threads - 1) / 2);
    }
  }
}

TEST_CASE("Workers wake up after sleeping") {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  for (int r = 0; r < 5; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the spin window
    pool.Run([&](int i) { total.fetch_add(i + 1, std::memory_order_relaxed); });
  }
  CHECK(total.load() == 5 * 6);
}

TEST_CASE("Parallel sum split with Split equals the serial sum") {
  ThreadPool pool(2);
  std::vector<int64_t> v(100003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i % 97);
  int64_t serial = 0;
  for (int64_t x : v) serial += x;
  std::vector<int64_t> part(pool.size());
  for (int rep = 0; rep < 50; ++rep) {
    pool.Run([&](int i) {
      int64_t b, e;
      ThreadPool::Split(static_cast<int64_t>(v.size()), pool.size(), i, 16, &b, &e);
      int64_t s = 0;
      for (int64_t k = b; k < e; ++k) s += v[k];
      part[i] = s;
    });
    CHECK(part[0] + part[1] == serial);
  }
}

TEST_CASE("MeasureReadBandwidth returns a positive rate") {
  ThreadPool pool(2);
  const double bw = MeasureReadBandwidth(pool, 8 << 20, 2);
  CHECK(bw > 1e8);  // > 0.1 GB/s on anything that runs this
}

TEST_CASE(
    "MeasureStreamBandwidth: positive, with stages of any size and more threads than a stage's "
    "lines") {
  ThreadPool pool(2);
  const std::vector<uint64_t> stages = {1 << 20, 64, 3000, 2 << 20};
  CHECK(MeasureStreamBandwidth(pool, stages, 2) > 1e8);
  ThreadPool one(1);
  CHECK(MeasureStreamBandwidth(one, stages, 1) > 1e8);
  for (auto variant : {StreamVariant::kTemporal, StreamVariant::kNonTemporal}) {
    SetStreamVariant(variant);
    CHECK(MeasureStreamBandwidth(pool, std::vector<uint64_t>{4 << 20}, 1) > 1e8);
  }
}

TEST_CASE("MeasureCrossCoreRead: rates with 2 threads, zeros with 1") {
  ThreadPool two(2);
  const CrossCoreRead r = MeasureCrossCoreRead(two, 4 << 20, 2);
  CHECK(r.own > 1e8);
  CHECK(r.other > 1e8);
  ThreadPool one(1);
  const CrossCoreRead z = MeasureCrossCoreRead(one, 4 << 20, 1);
  CHECK(z.own == 0.0);
  CHECK(z.other == 0.0);
}

}  // namespace
}  // namespace braid::kernels
