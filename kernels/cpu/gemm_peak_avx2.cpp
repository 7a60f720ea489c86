// The maddubs loop of MeasureInt8DotPeak on AVX2 CPUs (ggml's int8 idiom:
// maddubs + madd + add per 32 multiply-adds).
#include <immintrin.h>

#include <cstdint>

namespace braid::kernels::cpu {

int64_t Int8DotLoopAvx2(int64_t iters, int32_t* sink) {
  __m256i acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_set1_epi32(k);
  __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-5), one = _mm256_set1_epi16(1);
  __asm__ volatile("" : "+x"(a), "+x"(b), "+x"(one));
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < 8; ++k)
      acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), one));
    __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]), "+x"(acc[4]),
                     "+x"(acc[5]), "+x"(acc[6]), "+x"(acc[7]));
  }
  __m256i s = acc[0];
  for (int k = 1; k < 8; ++k) s = _mm256_add_epi32(s, acc[k]);
  int32_t out[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), s);
  *sink = out[0] + out[7];
  return iters * 8 * 32;
}

}  // namespace braid::kernels::cpu
