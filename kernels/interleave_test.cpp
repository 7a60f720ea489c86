// Interleaved weights (kernels/matmul.h, WeightLayout::kInterleaved16): the
// layout round trip, the SIMD group kernels bit for bit against the scalar
// reference, batch and row-range invariance, and accuracy against VecDot on
// the original rows.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
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
using testing::RandomWeights;

struct Packed {
  std::unique_ptr<uint8_t, decltype(&std::free)> buf{nullptr, &std::free};
  MatrixView view{};
};

Packed Pack(const MatrixView& w) {
  Packed p;
  const size_t bytes = (InterleavedBytes(w.type, w.rows, w.cols) + 63) / 64 * 64;
  p.buf.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
  p.view = Interleave(w, p.buf.get());
  return p;
}

// y for tokens [0, n) and rows [r0, r1) (ldy = rows + 5, untouched cells -7).
std::vector<float> Run(const MatrixView& w, DType at, const std::vector<uint8_t>& x, size_t xb,
                       int n, int64_t r0, int64_t r1) {
  const int64_t ldy = w.rows + 5;
  std::vector<float> y(static_cast<size_t>(ldy * n), -7.0f);
  MatMulQuantized(w, at, x.data(), xb, n, r0, r1, y.data(), ldy);
  return y;
}

void CheckShape(DType t, ActPrecision p, int64_t rows, int64_t cols, std::mt19937& rng) {
  const DType at = ActivationType(t, p);
  const std::vector<uint8_t> w = RandomWeights(rng, t, rows, cols);
  const MatrixView mv{t, rows, cols, w.data(), RowBytes(t, cols)};
  const Packed packed = Pack(mv);
  const int n = 19;  // two full passes of 8 and a partial one
  size_t xb;
  const std::vector<uint8_t> x = RandomActivations(rng, at, n, cols, &xb);
  const int64_t ldy = rows + 5;
  INFO("isa " << std::string(KernelIsa()) << " " << std::string(Info(t).name) << " x "
              << std::string(Info(at).name) << " rows " << rows << " cols " << cols);

  const std::vector<float> all = Run(packed.view, at, x, xb, n, 0, rows);
  // The scalar reference, bit for bit.
  std::vector<float> want(all.size(), -7.0f);
  ref::MatMulInterleaved(t, packed.view.data, cols, at, x.data(), xb, n, 0, rows, want.data(), ldy);
  CHECK(std::memcmp(all.data(), want.data(), all.size() * sizeof(float)) == 0);
  // Batch invariance: every token alone, and a batch starting elsewhere.
  int differ = 0;
  for (int tk = 0; tk < n; ++tk) {
    const std::vector<uint8_t> one(x.begin() + tk * xb, x.begin() + (tk + 1) * xb);
    const std::vector<float> y1 = Run(packed.view, at, one, xb, 1, 0, rows);
    differ += std::memcmp(y1.data(), all.data() + tk * ldy, rows * sizeof(float)) != 0;
  }
  CHECK(differ == 0);
  // Row ranges as threads split them (16-aligned), padding and row 0..15 of
  // other ranges untouched.
  if (rows > 16) {
    std::vector<float> y(all.size(), -7.0f);
    MatMulQuantized(packed.view, at, x.data(), xb, n, 16, rows, y.data(), ldy);
    for (int tk = 0; tk < n; ++tk) {
      CHECK(y[tk * ldy] == -7.0f);
      CHECK(y[tk * ldy + rows] == -7.0f);
      CHECK(std::memcmp(y.data() + tk * ldy + 16, all.data() + tk * ldy + 16,
                        (rows - 16) * sizeof(float)) == 0);
    }
  }
  // The prepared path, storing and adding into y (y += W x: one fp32 add per cell).
  if (HasPreparedPath(packed.view, at)) {
    // Prepared in two token ranges, as two threads would.
    std::vector<uint8_t> prep(PreparedBytes(cols, n));
    PrepareRows(packed.view, at, x.data(), xb, 0, 5, n, prep.data());
    PrepareRows(packed.view, at, x.data() + 5 * xb, xb, 5, n, n, prep.data());
    std::vector<float> y(all.size(), -7.0f);
    MatMulPrepared(packed.view, at, prep.data(), n, 0, rows, y.data(), ldy);
    CHECK(std::memcmp(y.data(), all.data(), all.size() * sizeof(float)) == 0);
    std::vector<float> base = testing::RandomFloats(rng, static_cast<int64_t>(all.size()));
    y = base;
    MatMulPrepared(packed.view, at, prep.data(), n, 0, rows, y.data(), ldy, /*accumulate=*/true);
    int wrong = 0;
    for (int tk = 0; tk < n; ++tk)
      for (int64_t r = 0; r < ldy; ++r) {
        const size_t i = static_cast<size_t>(tk * ldy + r);
        wrong += y[i] != (r < rows ? base[i] + all[i] : base[i]);
      }
    CHECK(wrong == 0);
  }
  // Accuracy against the row-layout reference dot.
  int bad = 0;
  for (int tk = 0; tk < n; ++tk) {
    CHECK(all[tk * ldy + rows] == -7.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const void* wr = w.data() + r * mv.row_bytes;
      const void* xr = x.data() + tk * xb;
      const double ref = ref::VecDot(t, at, cols, wr, xr);
      if (std::fabs(all[tk * ldy + r] - ref) > 2e-5 * AbsDot(t, at, wr, xr, cols) + 1e-6) ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("interleaved weights: SIMD == reference bitwise, batch and range invariant, accurate") {
  std::mt19937 rng(71);
  auto all = [&] {
    for (DType t : {DType::kQ4_1, DType::kQ8_0})
      for (ActPrecision p : {ActPrecision::kInt8, ActPrecision::kSplit16}) {
        CheckShape(t, p, 16, 32, rng);
        CheckShape(t, p, 48, 576, rng);
        CheckShape(t, p, 40, 96, rng);  // a padded last group
        CheckShape(t, p, 7, 160, rng);  // fewer rows than a group
        CheckShape(t, p, 33, 1536, rng);
        CheckShape(t, p, 24, 64, rng);  // a pair of groups, the second padded
      }
  };
  testing::ForEachSimdTable(all);
  const bool before = ForceScalarKernels(true);
  all();
  ForceScalarKernels(before);
}

TEST_CASE("interleaved Q8_0: weights of -128 (the extreme byte) stay exact") {
  std::mt19937 rng(73);
  const int64_t rows = 32, cols = 256;
  std::vector<uint8_t> w = RandomWeights(rng, DType::kQ8_0, rows, cols);
  const size_t rb = RowBytes(DType::kQ8_0, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b)
      for (int i = (r + b) % 3; i < 32; i += 3) w[r * rb + b * 34 + 2 + i] = 0x80;  // qs = -128
  const MatrixView mv{DType::kQ8_0, rows, cols, w.data(), rb};
  const Packed packed = Pack(mv);
  auto check = [&] {
    for (ActPrecision p : {ActPrecision::kInt8, ActPrecision::kSplit16}) {
      const DType at = ActivationType(DType::kQ8_0, p);
      size_t xb;
      const std::vector<uint8_t> x = RandomActivations(rng, at, 11, cols, &xb);
      const std::vector<float> got = Run(packed.view, at, x, xb, 11, 0, rows);
      std::vector<float> want(got.size(), -7.0f);
      ref::MatMulInterleaved(DType::kQ8_0, packed.view.data, cols, at, x.data(), xb, 11, 0, rows,
                             want.data(), rows + 5);
      INFO("isa " << std::string(KernelIsa()) << " " << std::string(Info(at).name));
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    }
  };
  testing::ForEachSimdTable(check);
}

TEST_CASE("interleaved weights: the layout keeps every row's bytes") {
  std::mt19937 rng(72);
  for (DType t : {DType::kQ4_1, DType::kQ8_0}) {
    const int64_t rows = 21, cols = 96;
    const std::vector<uint8_t> w = RandomWeights(rng, t, rows, cols);
    const MatrixView mv{t, rows, cols, w.data(), RowBytes(t, cols)};
    CHECK(InterleavedBytes(t, rows, cols) == 32 * mv.row_bytes);  // two groups, padded
    const Packed packed = Pack(mv);
    // Row r's dequantized values from the interleaved form: run the reference
    // with one-hot activations would mix scales; compare via a dot with
    // identical activations instead.
    size_t xb;
    const std::vector<uint8_t> x = RandomActivations(rng, ActivationType(t), 1, cols, &xb);
    std::vector<float> y(rows);
    ref::MatMulInterleaved(t, packed.view.data, cols, ActivationType(t), x.data(), xb, 1, 0, rows,
                           y.data(), rows);
    for (int64_t r = 0; r < rows; ++r) {
      const double want =
          ref::VecDot(t, ActivationType(t), cols, w.data() + r * mv.row_bytes, x.data());
      CHECK(y[r] == doctest::Approx(want).epsilon(1e-5).scale(1.0));
    }
  }
}

}  // namespace
}  // namespace braid::kernels
