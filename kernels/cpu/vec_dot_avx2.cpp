// AVX2 + FMA + F16C dot products (compiled with -mavx2 -mfma -mf16c; reached
// only through dispatch). The int8 products use ggml's maddubs idiom.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "cpu/kernel_table.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu {
namespace {

// 8 x int32: sum of 4 adjacent u8*s8 products. maddubs saturates int16 pairs,
// which our operands never reach (|u*s| <= 128*127 per product).
inline __m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Two products summed: u1.s1 + u2.s2 in 16 bits (each pair <= 2*15*127), then widened.
inline __m256i DotU8S8x2(__m256i u1, __m256i s1, __m256i u2, __m256i s2) {
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u1, s1), _mm256_maddubs_epi16(u2, s2));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// Split 16-bit: 8 x int32, 128 * (4-byte dot of u, hi) + (4-byte dot of u, lo),
// for u <= 128 (each maddubs pair |2 * 128 * 127| < 2^15; the madd by 128 is exact).
inline __m256i DotSplit(__m256i u, __m256i hi, __m256i lo) {
  return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, hi), _mm256_set1_epi16(128)),
                          _mm256_madd_epi16(_mm256_maddubs_epi16(u, lo), _mm256_set1_epi16(1)));
}

// 128 * (u1.h1 + u2.h2) + (u1.l1 + u2.l2), for u <= 15 (int16 sums of two pairs <= 7620).
inline __m256i DotSplitx2(__m256i u1, __m256i h1, __m256i l1, __m256i u2, __m256i h2, __m256i l2) {
  const __m256i ph = _mm256_add_epi16(_mm256_maddubs_epi16(u1, h1), _mm256_maddubs_epi16(u2, h2));
  const __m256i pl = _mm256_add_epi16(_mm256_maddubs_epi16(u1, l1), _mm256_maddubs_epi16(u2, l2));
  return _mm256_add_epi32(_mm256_madd_epi16(ph, _mm256_set1_epi16(128)),
                          _mm256_madd_epi16(pl, _mm256_set1_epi16(1)));
}

// vec_dot_simd.inc defines what decode_simd.inc uses.
// clang-format off
#include "cpu/vec_dot_simd.inc"
#include "cpu/decode_simd.inc"
// clang-format on

}  // namespace

void FillAvx2VecDot(KernelTable* t) {
  FillTable(t, "avx2");
  FillDecode(t);
}

}  // namespace braid::kernels::cpu
