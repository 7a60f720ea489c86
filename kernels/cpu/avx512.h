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
#include <utility>

namespace braid::kernels::cpu {

// f(integral_constant<int, i>) for i in [0, N): loop bodies with compile-time
// indices, so that GCC keeps arrays of vectors in registers (with a runtime
// index, even a constant-bound one, it keeps them in memory and reloads them
// around every use). Bodies should be `__attribute__((always_inline))`
// lambdas: large ones are otherwise left as calls.
template <int N, typename F>
__attribute__((always_inline)) inline void Unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) __attribute__((always_inline)) {
    (f(std::integral_constant<int, I>{}), ...);
  }(std::make_integer_sequence<int, N>{});
}

// acc + dot(u, the 4 bytes at s broadcast to every lane): vpdpbusd, unsigned
// bytes of u times signed bytes of s, with the broadcast read by the
// instruction itself ({1to16}); GCC 12 emits a separate vpbroadcastd for the
// intrinsic form, one more instruction per dot product.
__attribute__((always_inline)) inline __m512i DotBcast(__m512i acc, __m512i u, const void* s) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*static_cast<const int32_t*>(s)));
  return acc;
}

}  // namespace braid::kernels::cpu
