// Memory read bandwidth probe (see kernels/membw.h).
#include "kernels/membw.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace braid::kernels {
namespace cpu {
uint64_t ReadAllAvx2(const void* p, size_t bytes);
uint64_t StreamAllAvx2(const void* p, size_t bytes);
}  // namespace cpu

namespace {

uint64_t ReadAllScalar(const void* p, size_t bytes) {
  const auto* v = static_cast<const uint64_t*>(p);
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i < bytes / 8; i += 4) {
    a0 ^= v[i];
    a1 ^= v[i + 1];
    a2 ^= v[i + 2];
    a3 ^= v[i + 3];
  }
  return a0 ^ a1 ^ a2 ^ a3;
}

bool HasAvx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

// Keeps the reads' results alive, so that the compiler drops no read.
void KeepSums(const std::vector<uint64_t>& sink) {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  volatile uint64_t keep = 0;
  for (uint64_t s : sink) keep = keep ^ s;
  (void)keep;
}

}  // namespace

double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int repetitions) {
  const int n = pool.size();
  constexpr size_t kChunk = 4096;  // per-thread parts are whole pages
  bytes = std::max(bytes / (kChunk * n), size_t{1}) * kChunk * n;
  auto* buf = static_cast<char*>(std::aligned_alloc(kChunk, bytes));
  if (buf == nullptr) return 0.0;
  const size_t part = bytes / n;
  // First touch by the thread that will read the part (NUMA placement).
  pool.Run([&](int i) { std::memset(buf + part * i, i + 1, part); });

  const bool avx2 = HasAvx2();
  std::vector<uint64_t> sink(static_cast<size_t>(n) * 8);  // one cache line per thread
  double best = 1e30;
  for (int r = 0; r < std::max(1, repetitions); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.Run([&](int i) {
      const char* p = buf + part * i;
      sink[static_cast<size_t>(i) * 8] ^= avx2 ? cpu::ReadAllAvx2(p, part) : ReadAllScalar(p, part);
    });
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count());
  }
  KeepSums(sink);
  std::free(buf);
  return static_cast<double>(bytes) / best;
}

double MeasureStreamBandwidth(ThreadPool& pool, std::span<const uint64_t> stages, int repetitions) {
  const int n = pool.size();
  constexpr size_t kLine = 128;  // StreamAllAvx2's step
  std::vector<size_t> at{0};     // stage s: [at[s], at[s + 1]), whole steps
  for (uint64_t b : stages) at.push_back(at.back() + std::max<size_t>(b / kLine, 1) * kLine);
  const size_t bytes = at.back();
  auto* buf = static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  if (buf == nullptr) return 0.0;
  const bool avx2 = HasAvx2();
  std::vector<uint64_t> sink(static_cast<size_t>(n) * 8);
  // Thread i's part of stage s, as ThreadPool::Split divides rows.
  auto part = [&](size_t s, int i, size_t* b, size_t* e) {
    int64_t lb, le;
    ThreadPool::Split(static_cast<int64_t>((at[s + 1] - at[s]) / kLine), n, i, 1, &lb, &le);
    *b = at[s] + static_cast<size_t>(lb) * kLine;
    *e = at[s] + static_cast<size_t>(le) * kLine;
  };
  pool.Run([&](int i) {  // first touch by the reader
    for (size_t s = 0; s + 1 < at.size(); ++s) {
      size_t b, e;
      part(s, i, &b, &e);
      std::memset(buf + b, i + 1, e - b);
    }
  });
  double best = 1e30;
  for (int r = 0; r <= std::max(1, repetitions); ++r) {  // pass 0 warms the caches
    const auto t0 = std::chrono::steady_clock::now();
    pool.Run([&](int i) {
      for (size_t s = 0; s + 1 < at.size(); ++s) {
        size_t b, e;
        part(s, i, &b, &e);
        if (e > b)
          sink[static_cast<size_t>(i) * 8] ^=
              avx2 ? cpu::StreamAllAvx2(buf + b, e - b) : ReadAllScalar(buf + b, e - b);
        pool.Barrier();
      }
    });
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (r > 0) best = std::min(best, dt.count());
  }
  KeepSums(sink);
  std::free(buf);
  return static_cast<double>(bytes) / best;
}

CrossCoreRead MeasureCrossCoreRead(ThreadPool& pool, size_t bytes, int repetitions) {
  CrossCoreRead best;
  if (pool.size() < 2) return best;
  bytes = std::max<size_t>(bytes / 4096, 1) * 4096;
  const bool avx2 = HasAvx2();
  uint64_t sink = 0;
  auto read = [&](const char* p) {
    sink ^= avx2 ? cpu::ReadAllAvx2(p, bytes) : ReadAllScalar(p, bytes);
  };
  for (int r = 0; r < std::max(1, repetitions); ++r) {
    auto* buf = static_cast<char*>(std::aligned_alloc(4096, bytes));
    if (buf == nullptr) return best;
    // Each step is its own parallel region, so the reads do not overlap.
    pool.Run([&](int i) {
      if (i != 0) return;
      std::memset(buf, 1, bytes);
      read(buf);
    });
    auto timed = [&](int reader) {
      double rate = 0.0;
      pool.Run([&](int i) {
        if (i != reader) return;
        const auto t0 = std::chrono::steady_clock::now();
        read(buf);
        const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        rate = static_cast<double>(bytes) / dt.count();
      });
      return rate;
    };
    best.own = std::max(best.own, timed(0));  // then the other core, after it
    best.other = std::max(best.other, timed(1));
    std::free(buf);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  volatile uint64_t keep = sink;
  (void)keep;
  return best;
}

}  // namespace braid::kernels
