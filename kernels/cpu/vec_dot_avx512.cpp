// AVX-512 VNNI dot products: the shared kernels of vec_dot_simd.inc with the
// int8 product done by vpdpbusd (one instruction, no int16 saturation) on
// 256-bit registers (AVX512VL), which Zen 4 and Intel cores run at full rate.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "cpu/kernel_table.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu {
namespace {

// 8 x int32: sum of 4 adjacent u8*s8 products (vpdpbusd).
inline __m256i DotU8S8(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

// Two products summed: u1.s1 + u2.s2 (two chained vpdpbusd).
inline __m256i DotU8S8x2(__m256i u1, __m256i s1, __m256i u2, __m256i s2) {
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u1, s1), u2, s2);
}

// Split 16-bit: 8 x int32, 128 * (4-byte dot of u, hi) + (4-byte dot of u, lo):
// the hi products shifted left by 7, then the lo products accumulated onto them.
inline __m256i DotSplit(__m256i u, __m256i hi, __m256i lo) {
  const __m256i h = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, hi);
  return _mm256_dpbusd_epi32(_mm256_slli_epi32(h, 7), u, lo);
}

// 128 * (u1.h1 + u2.h2) + (u1.l1 + u2.l2).
inline __m256i DotSplitx2(__m256i u1, __m256i h1, __m256i l1, __m256i u2, __m256i h2, __m256i l2) {
  const __m256i h =
      _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u1, h1), u2, h2);
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_slli_epi32(h, 7), u1, l1), u2, l2);
}

// vec_dot_simd.inc defines what decode_simd.inc uses.
// clang-format off
#include "cpu/vec_dot_simd.inc"
#include "cpu/decode_simd.inc"
// clang-format on

}  // namespace

void FillAvx512VecDot(KernelTable* t) {
  FillTable(t, "avx512vnni");
  FillDecode(t);
}

}  // namespace braid::kernels::cpu
