// The AVX-512 intrinsics for the *_avx512.cpp files (include this instead of
// <immintrin.h>). GCC 12's AVX-512 headers build their "undefined" vectors as
// `__m512i __Y = __Y;`, which -Wuninitialized reports once inlined (GCC bug
// 105593, fixed in GCC 13); the warnings are silenced for these files only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "cpu/unroll.h"

namespace braid::kernels::cpu {

// acc + dot(u, the 4 bytes at s broadcast to every lane): vpdpbusd, unsigned
// bytes of u times signed bytes of s, with the broadcast read by the
// instruction itself ({1to16}); GCC 12 emits a separate vpbroadcastd for the
// intrinsic form, one more instruction per dot product.
__attribute__((always_inline)) inline __m512i DotBcast(__m512i acc, __m512i u, const void* s) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*static_cast<const int32_t*>(s)));
  return acc;
}

// Lane i of the result = op over the 16 lanes of v[i], as one fixed tree:
// lanes paired by unpack (32 bits), then unpack (64 bits), then two 128-bit
// shuffles. `op` combines two vectors lane by lane (an fp32 add keeps this
// order; max and integer adds are exact in any order). Integer vectors go
// through as their bits (_mm512_castsi512_ps).
template <typename Op>
__attribute__((always_inline)) inline __m512 TransposeReduce16(const __m512 v[16], Op op) {
  __m512 a[8], b[4];
  for (int k = 0; k < 8; ++k)
    a[k] =
        op(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  for (int k = 0; k < 4; ++k) {
    const __m512d x = _mm512_castps_pd(a[2 * k]), y = _mm512_castps_pd(a[2 * k + 1]);
    b[k] =
        op(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  const __m512 c0 =
      op(_mm512_shuffle_f32x4(b[0], b[1], 0x88), _mm512_shuffle_f32x4(b[0], b[1], 0xDD));
  const __m512 c1 =
      op(_mm512_shuffle_f32x4(b[2], b[3], 0x88), _mm512_shuffle_f32x4(b[2], b[3], 0xDD));
  return op(_mm512_shuffle_f32x4(c0, c1, 0x88), _mm512_shuffle_f32x4(c0, c1, 0xDD));
}

}  // namespace braid::kernels::cpu
