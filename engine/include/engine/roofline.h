// The roofline of a run's decode-only steps (braid bench --serve): what the
// hardware allows them, from the bandwidth and operation rate measured in
// the same run.
#pragma once

#include <cstdint>

namespace braid {

struct DecodeRoofline {
  double seconds = 0;           // all the steps together; 0 without a bandwidth
  bool products_bound = false;  // the products slower than the weights' read
};

// `steps` decode-only steps decoding `sequences` tokens in all and attending
// `context_tokens` positions in all. A step reads `weight_bytes` once or,
// where that is slower, computes its products (`ops_per_seq` operations a
// sequence, its share of the mean sequences a step) at `ops_rate`; every
// decode reads its KV, `kv_bytes_per_token` a position, once; bytes at
// `bandwidth`. The mean sequence count gives no more than the steps' own
// counts would (the larger of two terms, summed), so it stays a bound.
// ops_rate 0: the weights' read alone.
DecodeRoofline DecodeStepsRoofline(uint64_t steps, uint64_t sequences, uint64_t context_tokens,
                                   double weight_bytes, double kv_bytes_per_token, double bandwidth,
                                   double ops_per_seq, double ops_rate);

}  // namespace braid
