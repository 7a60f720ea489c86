// The int8 peak probe: its assembly loops run the instructions they claim
// (the accumulated values are exact), and the probe reports a positive rate.
#include "kernels/gemm_peak.h"

#include <doctest/doctest.h>

#include <cstdint>

#include "kernels/thread_pool.h"

namespace braid::kernels {
namespace cpu {
int64_t Int8DotLoopAvx512(int64_t iters, int32_t* sink);
int64_t Int8DotLoopAvx2(int64_t iters, int32_t* sink);
}  // namespace cpu

TEST_CASE("int8 peak loops execute every multiply-add") {
#if defined(__x86_64__)
  __builtin_cpu_init();
  int32_t sink = 0;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vnni")) {
    // Each vpdpbusd adds 4 x (1 x -1) per lane; the sink is 3 accumulators' lane 0.
    CHECK(cpu::Int8DotLoopAvx512(1000, &sink) == 1000 * 16 * 64);
    CHECK(sink == -12 * 1000);
  }
  if (__builtin_cpu_supports("avx2")) {
    // Each step adds 2 x (255 + 255) per lane; the sink is 2 accumulators' lane 0.
    CHECK(cpu::Int8DotLoopAvx2(1000, &sink) == 1000 * 8 * 32);
    CHECK(sink == 2 * 1020 * 1000);
  }
#endif
  ThreadPool pool(1);
  CHECK(MeasureInt8DotPeak(pool, 0.01, 1) >= 0.0);
}

}  // namespace braid::kernels
