// Compile-time loop unrolling for the SIMD kernels.
#pragma once

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
  }
  (std::make_integer_sequence<int, N>{});
}

}  // namespace braid::kernels::cpu
