// 512-bit decode kernels for split 16-bit activations (AVX-512 BW + VNNI;
// compiled with the AVX-512 flags, reached only through dispatch). They replace
// the 256-bit ones of decode_simd.inc for Q4_1 x Q16_1 and Q8_0 x Q16_0, for one
// token (`rows`) and for several (`rows_multi`); the kernels themselves are the
// templates of decode_avx512.h, and this file gives them the workspace layout
// and the dot product of the split activations. For each group, with u the
// weight quants as unsigned bytes and q16 = 128 hi + lo the activations,
//   p = dpbusd(dpbusd(init, u, hi) << 7, u, lo) = sum u * q16 + 128 init
// exactly in int32, then one vcvtdq2ps and one FMA with the blocks' scales.
#include <cstring>

#include "cpu/avx512.h"
#include "cpu/decode_avx512.h"
#include "cpu/kernel_table.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu {
namespace {

using namespace decode512;

// ---- Q4_1 x Q16_1 ----------------------------------------------------------------
// A group (256 bytes): the hi planes, then the lo planes, each as Q4_1Layout
// describes (decode_avx512.h):
//   [0, 64):    hi_{4g+k}[0, 16) in 128-bit lane k      (meets the low nibbles)
//   [64, 128):  hi_{4g+k}[16, 32) in lane k             (meets the high nibbles)
//   [128, 256): the same for lo
// scales: [dx_k, sx_k = dx_k * sum_k] with sum_k = sum(q16) of block k.
struct Split16Q4_1 {
  static constexpr size_t kGroupBytes = 256;
  static constexpr int kMultiTokens = 4;
  // 16 x int32: sum of u * q16 over four blocks (block k in lanes 4k..4k+3): the
  // low nibbles meet activations [0, 16) of each block, the high nibbles [16, 32).
  static __m512i Dot(const NibblesQ4_1& q, const uint8_t* x) {
    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q.lo, Load512(x));
    p = _mm512_slli_epi32(_mm512_dpbusd_epi32(p, q.hi, Load512(x + 64)), 7);
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(p, q.lo, Load512(x + 128)), q.hi,
                               Load512(x + 192));
  }
};

void PrepareQ16_1x4(int64_t n, const void* xq, uint8_t* ws) {
  const auto* x = static_cast<const BlockQ16_1*>(xq);
  const Q4_1Layout l(n, Split16Q4_1::kGroupBytes);
  float* scales = l.scales(ws);
  // Block i (or zeros for i < 0 or i >= nb) into lane k of the group at p, scales at s.
  auto put = [&](uint8_t* p, float* s, int k, int64_t i) {
    if (i >= 0 && i < l.nb) {
      std::memcpy(p + 16 * k, x[i].hi, 16);
      std::memcpy(p + 64 + 16 * k, x[i].hi + 16, 16);
      std::memcpy(p + 128 + 16 * k, x[i].lo, 16);
      std::memcpy(p + 192 + 16 * k, x[i].lo + 16, 16);
      s[2 * k] = x[i].d;
      s[2 * k + 1] = x[i].d * static_cast<float>(x[i].sum);
    } else {
      for (int o = 0; o < 256; o += 64) std::memset(p + o + 16 * k, 0, 16);
      s[2 * k] = 0.0f;
      s[2 * k + 1] = 0.0f;
    }
  };
  for (int64_t g = 0; g < l.ng; ++g) {
    for (int k = 0; k < 4; ++k) put(ws + 256 * g, scales + 8 * g, k, 4 * g + k);
  }
  if (l.pair_tail) {
    for (int k = 0; k < 4; ++k) put(ws + 256 * l.ng, scales + 8 * l.ng, k, l.nb - 2 + k % 2);
  }
}

// ---- Q8_0 x Q16_0 ----------------------------------------------------------------
// A pair (128 bytes): [0, 64): hi_i[0, 32), hi_i+1[0, 32)   [64, 128): lo_i, lo_i+1.
// The per-block int32 is init = -sum(q16): shifted left by 7 with the hi
// products it cancels the 128 sum(q16) that u = w + 128 adds.
struct Split16Q8_0 {
  static constexpr size_t kPairBytes = 128;
  // (8 tokens per pass spill accumulators: 94 vs 114 GFLOP/s on the head.)
  static constexpr int kMultiTokens = 4;
  // 16 x int32: sum of w * q16 over blocks i (lanes 0..7) and i+1 (lanes 8..15);
  // init holds -sum(q16) of each block in lanes 0 and 8.
  static __m512i Dot(__m512i u, __m512i init, const uint8_t* x) {
    const __m512i p = _mm512_slli_epi32(_mm512_dpbusd_epi32(init, u, Load512(x)), 7);
    return _mm512_dpbusd_epi32(p, u, Load512(x + 64));
  }
};

void PrepareQ16_0x2(int64_t n, const void* xq, uint8_t* ws) {
  const auto* x = static_cast<const BlockQ16_0*>(xq);
  const Q8_0Layout l(n, Split16Q8_0::kPairBytes);
  auto* sums = reinterpret_cast<int32_t*>(ws + l.sums_off);
  auto* scales = reinterpret_cast<float*>(ws + l.scales_off);
  for (int64_t i = 0; i < 2 * l.np; ++i) {
    uint8_t* p = ws + 128 * (i / 2) + 32 * (i % 2);
    if (i < l.nb) {
      std::memcpy(p, x[i].hi, 32);
      std::memcpy(p + 64, x[i].lo, 32);
      int32_t s = 0;
      for (int j = 0; j < kQK; ++j) s += Q16(x[i].hi, x[i].lo, j);
      sums[i] = -s;
      scales[i] = x[i].d;
    } else {
      std::memset(p, 0, 32);
      std::memset(p + 64, 0, 32);
      sums[i] = 0;
      scales[i] = 0.0f;
    }
  }
}

}  // namespace

void FillAvx512Decode16(KernelTable* t) {
  t->decode[1][static_cast<int>(DType::kQ4_1)] = {PrepareQ16_1x4, RowsQ4_1<Split16Q4_1>,
                                                  RowsMultiQ4_1<Split16Q4_1>};
  t->decode[1][static_cast<int>(DType::kQ8_0)] = {PrepareQ16_0x2, RowsQ8_0<Split16Q8_0>,
                                                  RowsMultiQ8_0<Split16Q8_0>};
}

}  // namespace braid::kernels::cpu
