// 512-bit int8 activation quantizers (Q8_0, Q8_1): one 32-element block in two
// vectors, bit for bit ref::QuantizeRowQ8_0 / Q8_1 (as the AVX2 versions).
#include <cstdint>
#include <type_traits>

#include "cpu/avx512.h"
#include "cpu/kernel_table.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu {
namespace {

// q = clamp(lround(x * id), -127, 127) for 16 floats: trunc(v) plus the sign
// of v where |v - trunc(v)| >= 0.5 (exact for |v| < 2^23); NaN -> -127, as
// the reference's lround -> LONG_MIN -> clamp.
inline __m512i Round16(__m512 x, __m512 id) {
  const __m512 v = _mm512_mul_ps(x, id);
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask16 away =
      _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 unit =
      _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));  // +-1
  __m512 r = _mm512_mask_add_ps(t, away, t, unit);
  r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  return _mm512_cvtps_epi32(r);
}

// One block as ref::QuantizeSym8Half; returns sum(q).
inline int32_t QuantizeSym8Block(const float* x, uint16_t* d_out, int8_t* q) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  // max(|x|, m): a NaN element leaves m as it is, as std::max in the reference.
  const __m512 m =
      _mm512_max_ps(_mm512_abs_ps(x1), _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps()));
  const uint16_t d16 =
      static_cast<uint16_t>(_cvtss_sh(_mm512_reduce_max_ps(m) / 127.0f, _MM_FROUND_TO_NEAREST_INT));
  const float d = _cvtsh_ss(d16);
  const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  const __m512i r0 = Round16(x0, id), r1 = Round16(x1, id);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(r0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(r1));
  *d_out = d16;
  return _mm512_reduce_add_epi32(_mm512_add_epi32(r0, r1));
}

// Lane i of the result = the largest lane of m[i] (max is exact, so any order
// gives the reference's value; m[i] holds no NaN).
inline __m512 TransposeMax16(const __m512 m[16]) {
  return TransposeReduce16(m, [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); });
}

// Lane i of the result = the sum of the lanes of v[i] (integer: exact in any order).
inline __m512i TransposeSum16(const __m512i v[16]) {
  __m512 bits[16];
  for (int k = 0; k < 16; ++k) bits[k] = _mm512_castsi512_ps(v[k]);
  return _mm512_castps_si512(TransposeReduce16(bits, [](__m512 x, __m512 y) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(x), _mm512_castps_si512(y)));
  }));
}

// Blocks of 32 as QuantizeSym8Block, 16 at a time where there are 16: the
// sixteen scales come from one transposed max tree and one vector division
// instead of a horizontal max, a scalar division and two conversions each.
template <typename Block>
void QuantizeBlocks(const float* x, Block* y, int64_t nb) {
  constexpr bool kSum = std::is_same_v<Block, BlockQ8_1>;
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    const float* xi = x + i * kQK;
    __m512 m[16];
    for (int k = 0; k < 16; ++k) {
      const __m512 x0 = _mm512_loadu_ps(xi + k * kQK), x1 = _mm512_loadu_ps(xi + k * kQK + 16);
      m[k] =
          _mm512_max_ps(_mm512_abs_ps(x1), _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps()));
    }
    const __m256i d16 = _mm512_cvtps_ph(_mm512_div_ps(TransposeMax16(m), _mm512_set1_ps(127.0f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 d = _mm512_cvtph_ps(d16);
    const __mmask16 nz = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    alignas(64) float id[16];
    alignas(32) uint16_t dh[16];
    _mm512_store_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(1.0f), d));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dh), d16);
    __m512i sums[16];
    for (int k = 0; k < 16; ++k) {
      const __m512 inv = _mm512_set1_ps(id[k]);
      const __m512i r0 = Round16(_mm512_loadu_ps(xi + k * kQK), inv);
      const __m512i r1 = Round16(_mm512_loadu_ps(xi + k * kQK + 16), inv);
      Block& b = y[i + k];
      _mm_storeu_si128(reinterpret_cast<__m128i*>(b.qs), _mm512_cvtsepi32_epi8(r0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(b.qs + 16), _mm512_cvtsepi32_epi8(r1));
      b.d = dh[k];
      sums[k] = _mm512_add_epi32(r0, r1);
    }
    if constexpr (kSum) {
      alignas(64) int32_t total[16];
      _mm512_store_si512(total, TransposeSum16(sums));
      for (int k = 0; k < 16; ++k) y[i + k].sum = static_cast<int16_t>(total[k]);
    }
  }
  for (; i < nb; ++i) {
    const int32_t sum = QuantizeSym8Block(x + i * kQK, &y[i].d, y[i].qs);
    if constexpr (kSum) y[i].sum = static_cast<int16_t>(sum);
  }
}

void QuantizeQ8_0(const float* x, void* dst, int64_t n) {
  QuantizeBlocks(x, static_cast<BlockQ8_0*>(dst), n / kQK);
}

void QuantizeQ8_1(const float* x, void* dst, int64_t n) {
  QuantizeBlocks(x, static_cast<BlockQ8_1*>(dst), n / kQK);
}

}  // namespace

void FillAvx512Quantize(KernelTable* t) {
  t->quantize8[0] = QuantizeQ8_0;
  t->quantize8[1] = QuantizeQ8_1;
}

}  // namespace braid::kernels::cpu
