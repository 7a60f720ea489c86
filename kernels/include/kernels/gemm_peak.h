// The int8 dot-product peak of this CPU: the limit that batched matmuls
// (`braid bench --serve`, kernels/cpu/matmul_bench.cpp) are judged against.
#pragma once

#include "kernels/thread_pool.h"

namespace braid::kernels {

// Runs a loop of independent int8 dot-product instructions on register-resident
// data (AVX-512 VNNI vpdpbusd on zmm; AVX2 maddubs + madd + add elsewhere) on
// every thread of the pool for about `seconds`, and returns the best of
// `repetitions` passes in int8 operations per second (a multiply-add counts
// as 2). Returns 0 on CPUs with neither. Call it from the pool's owner.
double MeasureInt8DotPeak(ThreadPool& pool, double seconds, int repetitions);

}  // namespace braid::kernels
