// 512-bit decode kernels for int8 activations (AVX-512 BW + VNNI; compiled with
// the AVX-512 flags, reached only through dispatch). They replace the 256-bit
// ones of decode_simd.inc for Q4_1 x Q8_1 and Q8_0 x Q8_0, for one token
// (`rows`) and for several (`rows_multi`); the kernels themselves are the
// templates of decode_avx512.h, and this file gives them the workspace layout
// and the dot product of the int8 activations. For each group, with u the
// weight quants as unsigned bytes and x the activations,
//   p = dpbusd(init, u, x) = sum u * x + init
// exactly in int32 (one vpdpbusd per 64 bytes of activations, half the work of
// the split 16-bit planes), then one vcvtdq2ps and one FMA with the blocks' scales.
#include <cstring>

#include "cpu/avx512.h"
#include "cpu/decode_avx512.h"
#include "cpu/kernel_table.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu {
namespace {

using namespace decode512;

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// ---- Q4_1 x Q8_1 -----------------------------------------------------------------
// A group (128 bytes), as Q4_1Layout describes (decode_avx512.h):
//   [0, 64):    x_{4g+k}[0, 16) in 128-bit lane k       (meets the low nibbles)
//   [64, 128):  x_{4g+k}[16, 32) in lane k              (meets the high nibbles)
// scales: [dx_k, sx_k = dx_k * sum_k] with sum_k the block's exact int16 sum.
struct Int8Q4_1 {
  static constexpr size_t kGroupBytes = 128;
  static constexpr int kMultiTokens = 4;
  // 16 x int32: sum of q * x over four blocks (block k in lanes 4k..4k+3).
  static __m512i Dot(const NibblesQ4_1& q, const uint8_t* x) {
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q.lo, Load512(x));
    return _mm512_dpbusd_epi32(p, q.hi, Load512(x + 64));
  }
};

void PrepareQ8_1x4(int64_t n, const void* xq, uint8_t* ws) {
  const auto* x = static_cast<const BlockQ8_1*>(xq);
  const Q4_1Layout l(n, Int8Q4_1::kGroupBytes);
  float* scales = l.scales(ws);
  // Block i (or zeros for i < 0 or i >= nb) into lane k of the group at p, scales at s.
  auto put = [&](uint8_t* p, float* s, int k, int64_t i) {
    if (i >= 0 && i < l.nb) {
      std::memcpy(p + 16 * k, x[i].qs, 16);
      std::memcpy(p + 64 + 16 * k, x[i].qs + 16, 16);
      s[2 * k] = Half(x[i].d);
      s[2 * k + 1] = Half(x[i].d) * static_cast<float>(x[i].sum);
    } else {
      std::memset(p + 16 * k, 0, 16);
      std::memset(p + 64 + 16 * k, 0, 16);
      s[2 * k] = 0.0f;
      s[2 * k + 1] = 0.0f;
    }
  };
  for (int64_t g = 0; g < l.ng; ++g) {
    for (int k = 0; k < 4; ++k) put(ws + 128 * g, scales + 8 * g, k, 4 * g + k);
  }
  if (l.pair_tail) {
    for (int k = 0; k < 4; ++k) put(ws + 128 * l.ng, scales + 8 * l.ng, k, l.nb - 2 + k % 2);
  }
}

// ---- Q8_0 x Q8_0 -----------------------------------------------------------------
// A pair (64 bytes): x_i[0, 32), x_i+1[0, 32). The per-block int32 is
// init = -128 sum(x_i), which cancels the 128 sum(x) that u = w + 128 adds.
struct Int8Q8_0 {
  static constexpr size_t kPairBytes = 64;
  static constexpr int kMultiTokens = 4;
  // 16 x int32: sum of w * x over blocks i (lanes 0..7) and i+1 (lanes 8..15);
  // init holds -128 sum(x) of each block in lanes 0 and 8.
  static __m512i Dot(__m512i u, __m512i init, const uint8_t* x) {
    return _mm512_dpbusd_epi32(init, u, Load512(x));
  }
};

void PrepareQ8_0x2(int64_t n, const void* xq, uint8_t* ws) {
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  const Q8_0Layout l(n, Int8Q8_0::kPairBytes);
  auto* sums = reinterpret_cast<int32_t*>(ws + l.sums_off);
  auto* scales = reinterpret_cast<float*>(ws + l.scales_off);
  for (int64_t i = 0; i < 2 * l.np; ++i) {
    uint8_t* p = ws + 32 * i;
    if (i < l.nb) {
      std::memcpy(p, x[i].qs, 32);
      int32_t s = 0;
      for (int j = 0; j < kQK; ++j) s += x[i].qs[j];
      sums[i] = -128 * s;
      scales[i] = Half(x[i].d);
    } else {
      std::memset(p, 0, 32);
      sums[i] = 0;
      scales[i] = 0.0f;
    }
  }
}

}  // namespace

void FillAvx512Decode8(KernelTable* t) {
  t->decode[0][static_cast<int>(DType::kQ4_1)] = {PrepareQ8_1x4, RowsQ4_1<Int8Q4_1>,
                                                  RowsMultiQ4_1<Int8Q4_1>};
  t->decode[0][static_cast<int>(DType::kQ8_0)] = {PrepareQ8_0x2, RowsQ8_0<Int8Q8_0>,
                                                  RowsMultiQ8_0<Int8Q8_0>};
}

}  // namespace braid::kernels::cpu
