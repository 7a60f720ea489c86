// A memory read bandwidth probe: the roofline that weight streaming is judged
// against (`braid bench`, kernels/cpu/matmul_bench.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/thread_pool.h"

namespace braid::kernels {

// Streams a freshly allocated buffer of `bytes` (use much more than the last-level
// cache, e.g. 512 MiB), split in contiguous parts between the pool's threads, and
// returns the best of `repetitions` passes in bytes per second. Uses AVX2 loads when
// the CPU has them. Allocates and touches the buffer; call it from the pool's owner.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int repetitions);

// What decode's weight stream can reach, read as decode reads it: `stages`
// are the weight bytes of each matmul stage of one decode step, in order
// (laid out back to back, bytes_per_token in all); each stage is split in
// contiguous parts between the pool's threads, with a barrier between stages,
// and read with the decode kernels' prefetches (kDecodePrefetchBytes ahead,
// the StreamVariant in use). Pass after pass over the same buffer: where it
// fits in the last-level cache this is that cache's bandwidth, else
// memory's. Best of `repetitions` passes after one warm-up pass, in bytes per
// second of the stages' total.
double MeasureStreamBandwidth(ThreadPool& pool, std::span<const uint64_t> stages, int repetitions);

// Whether two cores share their last-level cache, as the forward pass sees
// it: thread 0 of the pool writes and reads a buffer of `bytes` (more than a
// core's L2, less than the last-level cache, e.g. 8 MiB), then reads it again
// (`own`: bytes/s from its own caches), then thread 1 reads it (`other`).
// Where the cores share the cache, `other` is near `own`; where each core has
// its own (cores on different dies), the lines cross between the dies and
// `other` is at or below the memory read bandwidth, so data one core has just
// read costs the other a full fetch. Best of `repetitions`; zeros with fewer
// than 2 threads. Call it from the pool's owner.
struct CrossCoreRead {
  double own = 0.0, other = 0.0;  // bytes per second
};
CrossCoreRead MeasureCrossCoreRead(ThreadPool& pool, size_t bytes, int repetitions);

}  // namespace braid::kernels
