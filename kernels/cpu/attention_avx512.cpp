// The fused paged attention kernel on 512-bit vectors (attention_simd.inc).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers: see decode16_avx512.cpp (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "cpu/kernel_table.h"
#include "ref/ref.h"

namespace braid::kernels::cpu {
namespace {

struct Vec {
  using T = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kHeads = 4;   // 4 x 4 accumulators + 4 V vectors of 32 zmm
  static constexpr int kChunks = 4;  // head_dim 64 in one pass
  static T Zero() { return _mm512_setzero_ps(); }
  static T Set1(float f) { return _mm512_set1_ps(f); }
  static T Fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static __mmask16 Mask(int m) { return static_cast<__mmask16>((1u << m) - 1); }
  static T Load(const float* p, int m) {
    return m == kLanes ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(Mask(m), p);
  }
  static void Store(float* p, T v, int m) {
    if (m == kLanes) {
      _mm512_storeu_ps(p, v);
    } else {
      _mm512_mask_storeu_ps(p, Mask(m), v);
    }
  }
  // ((lanes 0..7 + 8..15) -> 4 -> 2 -> 1), a fixed tree.
  static float Sum(T v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "cpu/attention_simd.inc"

}  // namespace

void FillAvx512Attention(KernelTable* t) { t->attend = AttendPagedSimd; }

}  // namespace braid::kernels::cpu
