// Measurements of the machine used by benchmarks to put figures next to the
// limits measured in the same run.
#pragma once

namespace braid {

// Streaming read bandwidth in bytes/second with `threads` threads over a
// buffer far larger than the caches (best of a few repetitions).
double MeasureReadBandwidth(int threads);

}  // namespace braid
