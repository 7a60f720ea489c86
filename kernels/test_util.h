// Helpers shared by the kernels' doctest files.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernel_table.h"
#include "kernels/dtype.h"
#include "kernels/quant.h"
#include "ref/ref.h"

namespace braid::kernels::testing {

inline std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = d(rng);
  return v;
}

// A [rows, cols] weight matrix of `type` made from random floats.
inline std::vector<uint8_t> RandomWeights(std::mt19937& rng, DType type, int64_t rows,
                                          int64_t cols) {
  const size_t rb = RowBytes(type, cols);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x = RandomFloats(rng, cols);
    ref::QuantizeWeights(type, x.data(), w.data() + r * rb, cols);
  }
  return w;
}

// n_tokens activation rows of `cols` random floats quantized to `act_type`.
inline std::vector<uint8_t> RandomActivations(std::mt19937& rng, DType act_type, int n_tokens,
                                              int64_t cols, size_t* row_bytes) {
  *row_bytes = RowBytes(act_type, cols);
  std::vector<uint8_t> x(*row_bytes * static_cast<size_t>(n_tokens));
  for (int t = 0; t < n_tokens; ++t) {
    const std::vector<float> v = RandomFloats(rng, cols);
    QuantizeActivations(act_type, v.data(), x.data() + t * *row_bytes, cols);
  }
  return x;
}

// sum_i |w_i x_i| of the dequantized operands: the scale of a dot's rounding error.
inline double AbsDot(DType wt, DType at, const void* w, const void* x, int64_t n) {
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  ref::DequantizeRow(wt, w, a.data(), n);
  ref::DequantizeRow(at, x, b.data(), n);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::abs(static_cast<double>(a[i]) * b[i]);
  return s;
}

// Runs `fn` with the dispatched table, then (where the CPU has AVX2 and the best
// table is not already AVX2) with the AVX2 one, so both SIMD versions are tested.
template <typename Fn>
void ForEachSimdTable(Fn fn) {
  fn();
  const std::string best = KernelIsa();
  if (best != "avx2" && best != "scalar" && cpu::ForceAvx2Kernels(true)) {
    fn();
    cpu::ForceAvx2Kernels(false);
  }
}

}  // namespace braid::kernels::testing
