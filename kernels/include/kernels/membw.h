// A memory read bandwidth probe: the roofline that weight streaming is judged
// against (`braid bench`, kernels/cpu/matmul_bench.cpp).
#pragma once

#include <cstddef>

#include "kernels/thread_pool.h"

namespace braid::kernels {

// Streams a freshly allocated buffer of `bytes` (use much more than the last-level
// cache, e.g. 512 MiB), split in contiguous parts between the pool's threads, and
// returns the best of `repetitions` passes in bytes per second. Uses AVX2 loads when
// the CPU has them. Allocates and touches the buffer; call it from the pool's owner.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int repetitions);

}  // namespace braid::kernels
