// 512-bit int8 activation quantizers (Q8_0, Q8_1): one 32-element block in two
// vectors, bit for bit ref::QuantizeRowQ8_0 / Q8_1 (as the AVX2 versions).
#include "cpu/avx512.h"

#include <cstdint>

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
  const __mmask16 away = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 unit = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));  // +-1
  __m512 r = _mm512_mask_add_ps(t, away, t, unit);
  r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  return _mm512_cvtps_epi32(r);
}

// One block as ref::QuantizeSym8Half; returns sum(q).
inline int32_t QuantizeSym8Block(const float* x, uint16_t* d_out, int8_t* q) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  // max(|x|, m): a NaN element leaves m as it is, as std::max in the reference.
  const __m512 m = _mm512_max_ps(_mm512_abs_ps(x1), _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps()));
  const uint16_t d16 = static_cast<uint16_t>(_cvtss_sh(_mm512_reduce_max_ps(m) / 127.0f, _MM_FROUND_TO_NEAREST_INT));
  const float d = _cvtsh_ss(d16);
  const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  const __m512i r0 = Round16(x0, id), r1 = Round16(x1, id);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(r0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(r1));
  *d_out = d16;
  return _mm512_reduce_add_epi32(_mm512_add_epi32(r0, r1));
}

void QuantizeQ8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) QuantizeSym8Block(x + i * kQK, &y[i].d, y[i].qs);
}

void QuantizeQ8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i)
    y[i].sum = static_cast<int16_t>(QuantizeSym8Block(x + i * kQK, &y[i].d, y[i].qs));
}

}  // namespace

void FillAvx512Quantize(KernelTable* t) {
  t->quantize8[0] = QuantizeQ8_0;
  t->quantize8[1] = QuantizeQ8_1;
}

}  // namespace braid::kernels::cpu
