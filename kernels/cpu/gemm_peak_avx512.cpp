// The vpdpbusd loop of MeasureInt8DotPeak (AVX-512 VNNI, zmm).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

namespace braid::kernels::cpu {

// iters x 12 independent vpdpbusd chains (enough to cover a latency of 4-6
// cycles at 2 per cycle); returns the multiply-adds done (64 per instruction).
int64_t Int8DotLoopAvx512(int64_t iters, int32_t* sink) {
  __m512i acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_epi32(k);
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  __asm__ volatile("" : "+v"(a), "+v"(b));
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < 12; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
    __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]),
                     "+v"(acc[5]), "+v"(acc[6]), "+v"(acc[7]), "+v"(acc[8]), "+v"(acc[9]),
                     "+v"(acc[10]), "+v"(acc[11]));
  }
  __m512i s = acc[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_epi32(s, acc[k]);
  *sink = _mm512_reduce_add_epi32(s);
  return iters * 12 * 64;
}

}  // namespace braid::kernels::cpu
