// Lossless repacking of a weight type into one that has dot kernels
// (kernels/quant.h): Q5_0 -> Q8_0.
#include <cassert>

#include "kernels/quant.h"
#include "ref/blocks.h"

namespace braid::kernels {

// Element j's 5-bit q = low nibble (qs[j] for j < 16, qs[j - 16] >> 4 above)
// | bit j of qh << 4; Q8_0 stores q - 16 in [-16, 15] under the same d, and
// both dequantize as float(q - 16) * d, so the values agree bit for bit.
void RepackQ5_0AsQ8_0(const void* src, void* dst, int64_t n_elements) {
  assert(n_elements % kQK == 0);
  const auto* x = static_cast<const BlockQ5_0*>(src);
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n_elements / kQK; ++i) {
    const uint32_t qh = static_cast<uint32_t>(x[i].qh[0]) | static_cast<uint32_t>(x[i].qh[1]) << 8 |
                        static_cast<uint32_t>(x[i].qh[2]) << 16 |
                        static_cast<uint32_t>(x[i].qh[3]) << 24;
    y[i].d = x[i].d;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (x[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[i].qs[j] = static_cast<int8_t>(lo - 16);
      y[i].qs[j + kQK / 2] = static_cast<int8_t>(hi - 16);
    }
  }
}

}  // namespace braid::kernels
