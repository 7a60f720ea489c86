// 512-bit versions of elementwise ops of the decode step: RoPE (bit for bit
// the reference: the same products and sums, no fused multiply-add) and SwiGLU
// (the AVX2 version's exp on 16 lanes).
#include <cmath>
#include <initializer_list>

#include "cpu/avx512.h"
#include "cpu/exp_cephes.h"
#include "cpu/kernel_table.h"
#include "ref/ref.h"

namespace braid::kernels::cpu {
namespace {

// ref::RopeApply 16 pairs at a time where n_rot / 2 is a multiple of 16 (else
// the reference): a' = a c - b s, b' = a s + b c, with a, b the pair's
// elements (adjacent, or i and i + n_rot / 2 with `neox`).
void RopeApplyAvx512(float* x, int n_rot, const float* cos, const float* sin, bool neox) {
  const int half = n_rot / 2;
  if (half % 16 != 0) return ref::RopeApply(x, n_rot, cos, sin, neox);
  auto rotate = [](__m512 a, __m512 b, __m512 c, __m512 s, __m512* ra, __m512* rb) {
    *ra = _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s));
    *rb = _mm512_add_ps(_mm512_mul_ps(a, s), _mm512_mul_ps(b, c));
  };
  if (neox) {
    for (int i = 0; i < half; i += 16) {
      __m512 a, b;
      rotate(_mm512_loadu_ps(x + i), _mm512_loadu_ps(x + half + i), _mm512_loadu_ps(cos + i),
             _mm512_loadu_ps(sin + i), &a, &b);
      _mm512_storeu_ps(x + i, a);
      _mm512_storeu_ps(x + half + i, b);
    }
    return;
  }
  // Adjacent pairs: the even and odd elements of 32 apart, rotated, interleaved back.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int i = 0; i < half; i += 16) {
    const __m512 v0 = _mm512_loadu_ps(x + 2 * i), v1 = _mm512_loadu_ps(x + 2 * i + 16);
    __m512 a, b;
    rotate(_mm512_permutex2var_ps(v0, even, v1), _mm512_permutex2var_ps(v0, odd, v1),
           _mm512_loadu_ps(cos + i), _mm512_loadu_ps(sin + i), &a, &b);
    _mm512_storeu_ps(x + 2 * i, _mm512_permutex2var_ps(a, lo, b));
    _mm512_storeu_ps(x + 2 * i + 16, _mm512_permutex2var_ps(a, hi, b));
  }
}

// exp(x) as the AVX2 version (cpu/exp_cephes.h), 2^n by scalef.
__m512 ExpClamped(__m512 x) {
  using namespace exp_cephes;
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kMin)), _mm512_set1_ps(kMax));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP5);
  for (float k : {kP4, kP3, kP2, kP1, kP0}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// out = gate / (1 + exp(-gate)) * up
void SwiGluAvx512(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = ExpClamped(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_storeu_ps(
        out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace

void FillAvx512Ops(KernelTable* t) {
  t->rope_apply = RopeApplyAvx512;
  t->swiglu = SwiGluAvx512;
}

}  // namespace braid::kernels::cpu
