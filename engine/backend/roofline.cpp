#include "engine/roofline.h"

#include <algorithm>

namespace braid {

DecodeRoofline DecodeStepsRoofline(uint64_t steps, uint64_t sequences, uint64_t context_tokens,
                                   double weight_bytes, double kv_bytes_per_token, double bandwidth,
                                   double ops_per_seq, double ops_rate) {
  DecodeRoofline r;
  if (bandwidth <= 0 || steps == 0) return r;
  const double n = static_cast<double>(steps);
  const double weights_s = weight_bytes / bandwidth;
  const double products_s =
      ops_rate > 0 ? ops_per_seq * static_cast<double>(sequences) / n / ops_rate : 0;
  r.products_bound = products_s > weights_s;
  r.seconds = n * std::max(weights_s, products_s) +
              static_cast<double>(context_tokens) * kv_bytes_per_token / bandwidth;
  return r;
}

}  // namespace braid
