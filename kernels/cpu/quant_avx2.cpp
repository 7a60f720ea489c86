// AVX2 activation quantization (compiled with -mavx2; reached only through
// dispatch), bit-identical to the reference:
// - split 16-bit (ref::QuantizeRowQ16_*): the same fp32 operations (amax,
//   d = amax / 16256, id = 1 / d, x * id), and vcvtps2dq rounds to nearest
//   even as the reference's nearbyint does;
// - Q8_0 / Q8_1 (ref::QuantizeSym8Half): the fp16 scale computed by the same
//   scalar code, x * id on vectors, and lround's rounding (half away from zero)
//   rebuilt from truncation.
#include <immintrin.h>

#include <cfloat>

#include "cpu/kernel_table.h"
#include "kernels/dtype.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu {
namespace {

inline float Hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline int32_t HsumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// The scale of a block with absolute maximum amax: d = amax / 16256, or 0 when d
// is not a normal float (the block is then stored as zeros, as the reference does).
inline float Scale(float amax, float* id) {
  float d = amax / static_cast<float>(kQ16Max);
  if (!(d >= FLT_MIN && d <= FLT_MAX)) d = 0.0f;
  *id = d != 0.0f ? 1.0f / d : 0.0f;
  return d;
}

// q16 = clamp(round(x * id)) for 8 floats (NaN -> INT_MIN -> -16256, as the reference).
inline __m256i Q16x8(const float* x, __m256 id) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
  return _mm256_max_epi32(_mm256_min_epi32(q, _mm256_set1_epi32(kQ16Max)),
                          _mm256_set1_epi32(-kQ16Max));
}

// 32 q16 (4 x 8 int32) -> hi = (q + 64) >> 7, lo = q - 128 hi, as 32 int8 each.
inline void Split32(const __m256i q[4], int8_t* hi, int8_t* lo) {
  __m256i h[4], l[4];
  for (int k = 0; k < 4; ++k) {
    h[k] = _mm256_srai_epi32(_mm256_add_epi32(q[k], _mm256_set1_epi32(64)), 7);
    l[k] = _mm256_sub_epi32(q[k], _mm256_slli_epi32(h[k], 7));
  }
  // packs work within 128-bit lanes: the result holds 4-element runs in the order
  // [0 2 4 6 1 3 5 7] of the eight 4-element runs; the permute restores it.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i hb =
      _mm256_packs_epi16(_mm256_packs_epi32(h[0], h[1]), _mm256_packs_epi32(h[2], h[3]));
  const __m256i lb =
      _mm256_packs_epi16(_mm256_packs_epi32(l[0], l[1]), _mm256_packs_epi32(l[2], l[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), _mm256_permutevar8x32_epi32(hb, order));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), _mm256_permutevar8x32_epi32(lb, order));
}

inline __m256 AbsMax8(__m256 m, const float* x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  return _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x)));
}

// One 32-element block; returns sum(q16).
inline int32_t QuantizeBlock32(const float* x, float* d_out, int8_t* hi, int8_t* lo) {
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) m = AbsMax8(m, x + 8 * k);
  float id;
  *d_out = Scale(Hmax(m), &id);
  const __m256 vid = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = Q16x8(x + 8 * k, vid);
  Split32(q, hi, lo);
  return HsumI32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
}

void QuantizeQ16_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ16_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) QuantizeBlock32(x + i * kQK, &y[i].d, y[i].hi, y[i].lo);
}

void QuantizeQ16_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ16_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    y[i].sum = QuantizeBlock32(x + i * kQK, &y[i].d, y[i].hi, y[i].lo);
  }
}

void QuantizeQ16_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ16_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < kQKK / 8; ++k) m = AbsMax8(m, x + 8 * k);
    float id;
    y[i].d = Scale(Hmax(m), &id);
    const __m256 vid = _mm256_set1_ps(id);
    for (int c = 0; c < kQKK / 32; ++c) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) q[k] = Q16x8(x + 32 * c + 8 * k, vid);
      Split32(q, y[i].hi + 32 * c, y[i].lo + 32 * c);
      y[i].bsums[2 * c] = HsumI32(_mm256_add_epi32(q[0], q[1]));
      y[i].bsums[2 * c + 1] = HsumI32(_mm256_add_epi32(q[2], q[3]));
    }
  }
}

// q = clamp(lround(x * id), -127, 127) for 8 floats: trunc(v) plus the sign of v
// where |v - trunc(v)| >= 0.5 (exact for |v| < 2^23); NaN -> -127, as the
// reference's lround -> LONG_MIN -> clamp.
inline __m256i Round8(const float* x, __m256 id) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), id);
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 away =
      _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 unit = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));  // +-1, v's sign
  __m256 r = _mm256_add_ps(t, _mm256_and_ps(away, unit));
  r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvtps_epi32(r);
}

// One block as ref::QuantizeSym8Half; returns sum(q).
inline int32_t QuantizeSym8Block(const float* x, uint16_t* d_out, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  // max(|x|, m): a NaN element leaves m as it is, as std::max in the reference.
  for (int k = 0; k < 4; ++k)
    m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), m);
  // F16C in registers: the same rounding (to nearest even) as Fp32ToFp16, without a call per block.
  const uint16_t d16 =
      static_cast<uint16_t>(_cvtss_sh(Hmax(m) / 127.0f, _MM_FROUND_TO_NEAREST_INT));
  const float d = _cvtsh_ss(d16);
  const __m256 vid = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  __m256i r[4];
  for (int k = 0; k < 4; ++k) r[k] = Round8(x + 8 * k, vid);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // see Split32
  const __m256i b =
      _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(b, order));
  *d_out = d16;
  return HsumI32(_mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3])));
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

void FillAvx2Quantize(KernelTable* t) {
  t->quantize8[0] = QuantizeQ8_0;
  t->quantize8[1] = QuantizeQ8_1;
  t->quantize16[0] = QuantizeQ16_0;
  t->quantize16[1] = QuantizeQ16_1;
  t->quantize16[2] = QuantizeQ16_K;
}

}  // namespace braid::kernels::cpu
