// ThreadPool: every index runs once per Run, writes are visible after Run and
// across Barrier, and the pool survives sleeping between Runs. Build with
// -fsanitize=thread to check the memory ordering.
#include "kernels/thread_pool.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
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
        if (i == p % threads) {  // one thread reads all slots
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

// An adaptive pool whose second thread keeps the first waiting (as a
// descheduled peer would) narrows to one thread; once the waits stop it
// probes and returns to two. Sleeps here make the situation, not the order:
// the caller's wait for a worker asleep 3 ms is over half of each Run however
// slow the machine, and a caller that sleeps while the worker returns at once
// leaves nothing to wait for.
TEST_CASE("An adaptive pool narrows while a thread keeps the others waiting, then widens") {
  ThreadPool pool(2, /*adaptive=*/true);
  CHECK(pool.capacity() == 2);
  CHECK(pool.size() == 2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::atomic<int> max_index{0};
  auto record = [&](int i) {
    int m = max_index.load();
    while (i > m && !max_index.compare_exchange_weak(m, i)) {
    }
  };
  while (pool.size() == 2 && std::chrono::steady_clock::now() < deadline) {
    pool.Run([&](int i) {
      record(i);
      if (i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    });
  }
  REQUIRE(pool.size() == 1);
  CHECK(max_index.load() == 1);
  const ThreadPool::Stats narrowed = pool.stats();
  CHECK(narrowed.blocked_seconds > 0);
  // Narrowed Runs call only index 0, and Barrier is a no-op there.
  max_index = 0;
  pool.Run([&](int i) {
    record(i);
    pool.Barrier();
  });
  CHECK(max_index.load() == 0);
  CHECK(pool.stats().narrowed_runs >= 1);
  // Balanced again: a probe after the back-off holds.
  int seen_two = 0;
  while (seen_two < 20 && std::chrono::steady_clock::now() < deadline) {
    const int width = pool.size();
    pool.Run([&](int i) {
      CHECK(i < width);
      if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
    seen_two = width == 2 ? seen_two + 1 : 0;
  }
  CHECK(seen_two == 20);
}

TEST_CASE("A pool that is not adaptive keeps its width however long it waits") {
  ThreadPool pool(2);
  for (int r = 0; r < 20; ++r)
    pool.Run([&](int i) {
      if (i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
  CHECK(pool.size() == 2);
  CHECK(pool.stats().runs == 20);
  CHECK(pool.stats().narrowed_runs == 0);
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
  // Only that it is a rate: how fast is for the benchmarks, not this test.
  CHECK(std::isfinite(bw));
  CHECK(bw > 0);
}

TEST_CASE(
    "MeasureStreamBandwidth: positive, with stages of any size and more threads than a stage's "
    "lines") {
  ThreadPool pool(2);
  const std::vector<uint64_t> stages = {1 << 20, 64, 3000, 2 << 20};
  // A finite positive rate each time; the speed itself is for the benchmarks.
  auto positive = [](double bw) { return std::isfinite(bw) && bw > 0; };
  CHECK(positive(MeasureStreamBandwidth(pool, stages, 2)));
  ThreadPool one(1);
  CHECK(positive(MeasureStreamBandwidth(one, stages, 1)));
  for (auto variant : {StreamVariant::kTemporal, StreamVariant::kNonTemporal}) {
    SetStreamVariant(variant);
    CHECK(positive(MeasureStreamBandwidth(pool, std::vector<uint64_t>{4 << 20}, 1)));
  }
}

TEST_CASE("MeasureCrossCoreRead: rates with 2 threads, zeros with 1") {
  ThreadPool two(2);
  const CrossCoreRead r = MeasureCrossCoreRead(two, 4 << 20, 2);
  CHECK(std::isfinite(r.own));
  CHECK(r.own > 0);
  CHECK(std::isfinite(r.other));
  CHECK(r.other > 0);
  ThreadPool one(1);
  const CrossCoreRead z = MeasureCrossCoreRead(one, 4 << 20, 1);
  CHECK(z.own == 0.0);
  CHECK(z.other == 0.0);
}

}  // namespace
}  // namespace braid::kernels
