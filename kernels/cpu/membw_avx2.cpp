// AVX2 streaming read for the bandwidth probe (compiled with -mavx2).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu/kernel_table.h"

namespace braid::kernels::cpu {
namespace {

// XOR of every 32-byte word of p[0, bytes), 4 independent load streams per
// 128-byte step; bytes is a multiple of 128 and p 64-byte aligned. kPrefetch:
// with the decode kernels' prefetches (PrefetchAhead, the StreamVariant in
// use) one step at a time.
template <bool kPrefetch>
uint64_t XorAll(const void* p, size_t bytes) {
  const auto* v = static_cast<const __m256i*>(p);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < bytes / 32; i += 4) {
    if constexpr (kPrefetch) PrefetchAhead(v + i, 128);
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + i + 1));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + i + 2));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + i + 3));
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  const __m128i b = _mm_xor_si128(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(b)) ^
         static_cast<uint64_t>(_mm_extract_epi64(b, 1));
}

}  // namespace

uint64_t ReadAllAvx2(const void* p, size_t bytes) { return XorAll<false>(p, bytes); }
uint64_t StreamAllAvx2(const void* p, size_t bytes) { return XorAll<true>(p, bytes); }

}  // namespace braid::kernels::cpu
