// MatMulQuantized against per-row scalar VecDot (both activation precisions,
// n_tokens 1..9, row ranges, a padded ldy; the dispatched and the AVX2 table),
// and MatMulF32 against an fp64 dot of dequantized rows.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "ref/ref.h"
#include "test_util.h"

namespace braid::kernels {
namespace {

using testing::AbsDot;
using testing::RandomActivations;
using testing::RandomFloats;
using testing::RandomWeights;

void CheckMatMulQuantized(DType t, ActPrecision p, int64_t rows, int64_t cols, std::mt19937& rng) {
  const DType at = ActivationType(t, p);
  const std::vector<uint8_t> w = RandomWeights(rng, t, rows, cols);
  const MatrixView mv{t, rows, cols, w.data(), RowBytes(t, cols)};
  for (int n_tokens = 1; n_tokens <= 9; ++n_tokens) {
    size_t xb;
    const std::vector<uint8_t> x = RandomActivations(rng, at, n_tokens, cols, &xb);
    const int64_t ldy = rows + 3;
    std::vector<float> y(static_cast<size_t>(ldy * n_tokens), -7.0f);
    // Two disjoint row ranges, as two threads would compute them; row 0 left alone.
    const int64_t mid = rows / 3 + 1;
    MatMulQuantized(mv, at, x.data(), xb, n_tokens, 1, mid, y.data(), ldy);
    MatMulQuantized(mv, at, x.data(), xb, n_tokens, mid, rows, y.data(), ldy);
    int bad = 0;
    for (int tk = 0; tk < n_tokens; ++tk) {
      CHECK(y[tk * ldy] == -7.0f);                 // outside [r0, r1): untouched
      CHECK(y[tk * ldy + rows] == -7.0f);          // padding: untouched
      for (int64_t r = 1; r < rows; ++r) {
        const void* wr = w.data() + r * mv.row_bytes;
        const void* xr = x.data() + tk * xb;
        const double want = ref::VecDot(t, at, cols, wr, xr);
        const double tol = 2e-5 * AbsDot(t, at, wr, xr, cols) + 1e-6;
        if (std::fabs(y[tk * ldy + r] - want) > tol) ++bad;
      }
    }
    INFO("isa " << std::string(KernelIsa()) << " type " << std::string(Info(t).name) << " x " << std::string(Info(at).name) << " rows "
                << rows << " cols " << cols << " n_tokens " << n_tokens);
    CHECK(bad == 0);
  }
}

// Row lengths with 1..4 blocks past a multiple of four, so every tail of the
// decode kernels (pairs, groups of four) is taken.
void CheckAllTypes(ActPrecision p, std::mt19937& rng) {
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kF32, DType::kF16,
                  DType::kBF16}) {
    CheckMatMulQuantized(t, p, 37, 576, rng);
    CheckMatMulQuantized(t, p, 20, 96, rng);
    CheckMatMulQuantized(t, p, 19, 160, rng);
    CheckMatMulQuantized(t, p, 17, 128, rng);
    CheckMatMulQuantized(t, p, 5, 32, rng);
    // Odd row counts in a range (rows taken in pairs, one left over).
    CheckMatMulQuantized(t, p, 38, 576, rng);
    CheckMatMulQuantized(t, p, 20, 64, rng);
    CheckMatMulQuantized(t, p, 11, 192, rng);
  }
  for (DType t : {DType::kQ4_K, DType::kQ6_K}) {
    CheckMatMulQuantized(t, p, 37, 512, rng);
    CheckMatMulQuantized(t, p, 19, 256, rng);
  }
}

TEST_CASE("MatMulQuantized matches scalar VecDot for every weight type") {
  std::mt19937 rng(21);
  testing::ForEachSimdTable([&] {
    INFO("isa = " << KernelIsa());
    CheckAllTypes(ActPrecision::kInt8, rng);
  });
}

TEST_CASE("MatMulQuantized with split 16-bit activations matches scalar VecDot") {
  std::mt19937 rng(24);
  testing::ForEachSimdTable([&] {
    INFO("isa = " << KernelIsa());
    CheckAllTypes(ActPrecision::kSplit16, rng);
  });
}

TEST_CASE("MatMulQuantized under ForceScalarKernels") {
  const bool before = ForceScalarKernels(true);
  std::mt19937 rng(22);
  for (ActPrecision p : {ActPrecision::kInt8, ActPrecision::kSplit16}) {
    CheckMatMulQuantized(DType::kQ4_1, p, 21, 576, rng);
    CheckMatMulQuantized(DType::kQ8_0, p, 9, 96, rng);
    CheckMatMulQuantized(DType::kQ6_K, p, 9, 256, rng);
  }
  CheckMatMulQuantized(DType::kQ4_0, ActPrecision::kSplit16, 9, 64, rng);
  CheckMatMulQuantized(DType::kQ4_K, ActPrecision::kSplit16, 9, 256, rng);
  ForceScalarKernels(before);
}

// The decode kernels on many rows: the Q8_0 head and a Q4_1 FFN shape.
TEST_CASE("split 16-bit decode path on model-sized matrices") {
  std::mt19937 rng(25);
  testing::ForEachSimdTable([&] {
    INFO("isa = " << KernelIsa());
    CheckMatMulQuantized(DType::kQ8_0, ActPrecision::kSplit16, 515, 576, rng);
    CheckMatMulQuantized(DType::kQ4_1, ActPrecision::kSplit16, 301, 576, rng);
    CheckMatMulQuantized(DType::kQ4_1, ActPrecision::kSplit16, 67, 1536, rng);
  });
}

TEST_CASE("MatMulF32 is the exact path") {
  std::mt19937 rng(23);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t rows = 13, cols = 512;
    const std::vector<uint8_t> w = RandomWeights(rng, t, rows, cols);
    const MatrixView mv{t, rows, cols, w.data(), RowBytes(t, cols)};
    const int n_tokens = 5;
    const std::vector<float> x = RandomFloats(rng, n_tokens * cols);
    std::vector<float> y(rows * n_tokens), scratch(cols);
    MatMulF32(mv, x.data(), n_tokens, 0, rows, y.data(), rows, scratch.data());
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      ref::DequantizeRow(t, w.data() + r * mv.row_bytes, row.data(), cols);
      for (int tk = 0; tk < n_tokens; ++tk) {
        double want = 0, mag = 0;
        for (int64_t i = 0; i < cols; ++i) {
          want += (double)row[i] * x[tk * cols + i];
          mag += std::fabs((double)row[i] * x[tk * cols + i]);
        }
        INFO("type " << std::string(Info(t).name));
        CHECK(std::fabs(y[tk * rows + r] - want) <= 1e-5 * mag + 1e-7);
      }
    }
  }
}

}  // namespace
}  // namespace braid::kernels
