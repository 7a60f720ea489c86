// AVX2 + FMA versions of the hot elementwise ops (compiled with -mavx2 -mfma).
#include <immintrin.h>

#include <cmath>
#include <initializer_list>

#include "cpu/exp_cephes.h"
#include "cpu/kernel_table.h"

namespace braid::kernels::cpu {
namespace {

float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// exp(x), ~2 ulp (cpu/exp_cephes.h), 2^n built in the exponent bits.
__m256 Exp(__m256 x) {
  using namespace exp_cephes;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kMin)), _mm256_set1_ps(kMax));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP5);
  for (float k : {kP4, kP3, kP2, kP1, kP0}) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// y = x / sqrt(mean(x^2) + eps) * w          x, y, w: [n]
void RmsNormAvx2(const float* x, const float* w, float eps, int64_t n, float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  double ss = Hsum(_mm256_add_ps(a0, a1));
  for (int64_t j = i; j < n; ++j) ss += static_cast<double>(x[j]) * x[j];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  const __m256 vs = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(
        y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) y[i] = x[i] * scale * w[i];
}

// out = gate / (1 + exp(-gate)) * up
void SwiGluAvx2(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp(_mm256_xor_ps(g, sign));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

float DotF32Avx2(const float* a, const float* b, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] =
          _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
  }
  float sum = Hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void AxpyAvx2(float a, const float* x, int64_t n, float* y) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

// ref::Argmax in two passes: the largest non-NaN value (vmaxps returns its
// second operand when the first is NaN), then the first index holding it.
int64_t ArgmaxAvx2(const float* x, int64_t n) {
  __m256 m[4];
  for (auto& v : m) v = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) m[k] = _mm256_max_ps(_mm256_loadu_ps(x + i + 8 * k), m[k]);
  __m256 all = _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3]));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, all);
  float best = -INFINITY;
  for (float v : lanes) best = v > best ? v : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  const __m256 b = _mm256_set1_ps(best);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), b, _CMP_EQ_OQ));
    if (hit != 0) return j + __builtin_ctz(static_cast<unsigned>(hit));
  }
  for (; j < n; ++j)
    if (x[j] == best) return j;
  return 0;
}

void FillAvx2Ops(KernelTable* t) {
  t->rms_norm = RmsNormAvx2;
  t->swiglu = SwiGluAvx2;
  t->dot_f32 = DotF32Avx2;
  t->axpy = AxpyAvx2;
  t->argmax = ArgmaxAvx2;
}

}  // namespace braid::kernels::cpu
