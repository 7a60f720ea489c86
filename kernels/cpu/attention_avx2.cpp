// The fused paged attention kernel on 256-bit vectors (attention_simd.inc).
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "cpu/kernel_table.h"
#include "cpu/unroll.h"
#include "ref/ref.h"

namespace braid::kernels::cpu {
namespace {

struct Vec {
  using T = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kHeads = 3;  // 3 x 4 accumulators + 4 V vectors of 16 ymm
  static constexpr int kChunks = 4;
  static T Zero() { return _mm256_setzero_ps(); }
  static T Set1(float f) { return _mm256_set1_ps(f); }
  static T Fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static __m256i Mask(int m) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static T LoadHalf(const uint16_t* p) {  // 8 fp16 -> fp32
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static T Load(const float* p, int m) {
    return m == kLanes ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, Mask(m));
  }
  static void Store(float* p, T v, int m) {
    if (m == kLanes) {
      _mm256_storeu_ps(p, v);
    } else {
      _mm256_maskstore_ps(p, Mask(m), v);
    }
  }
  static float Sum(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "cpu/attention_simd.inc"

}  // namespace

void FillAvx2Attention(KernelTable* t) {
  t->attend = AttendPagedSimd;
  t->attend_from = AttendPagedSimdFrom;
  t->attend_fast_f16 = FastF16Simd;
}

}  // namespace braid::kernels::cpu
