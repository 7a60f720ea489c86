// MeasureInt8DotPeak (kernels/gemm_peak.h): picks the loop for what the CPU
// reports, calibrates the iteration count on one thread, then times it on all.
#include "kernels/gemm_peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace braid::kernels {
namespace cpu {
int64_t Int8DotLoopAvx512(int64_t iters, int32_t* sink);
int64_t Int8DotLoopAvx2(int64_t iters, int32_t* sink);
}  // namespace cpu

namespace {

using Loop = int64_t (*)(int64_t, int32_t*);

Loop PickLoop() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vnni"))
    return cpu::Int8DotLoopAvx512;
  if (__builtin_cpu_supports("avx2")) return cpu::Int8DotLoopAvx2;
#endif
  return nullptr;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double MeasureInt8DotPeak(ThreadPool& pool, double seconds, int repetitions) {
  const Loop loop = PickLoop();
  if (loop == nullptr) return 0.0;
  int32_t sink = 0;
  // Calibrate: iterations for `seconds` on one thread.
  int64_t iters = 1 << 14;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    loop(iters, &sink);
    const double dt = Seconds(t0);
    if (dt > 0.02 || iters > (int64_t{1} << 40)) {
      iters = std::max<int64_t>(1, static_cast<int64_t>(iters * seconds / std::max(dt, 1e-9)));
      break;
    }
    iters *= 4;
  }
  std::vector<int32_t> sinks(pool.size());
  std::atomic<int64_t> macs{0};
  double best = 0.0;
  for (int rep = 0; rep < std::max(1, repetitions); ++rep) {
    macs = 0;
    const auto t0 = std::chrono::steady_clock::now();
    pool.Run([&](int tid) { macs += loop(iters, &sinks[tid]); });
    best = std::max(best, 2.0 * static_cast<double>(macs.load()) / Seconds(t0));
  }
  return best;
}

}  // namespace braid::kernels
