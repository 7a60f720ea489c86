// MatMulQuantized against per-row scalar VecDot (both activation precisions,
// n_tokens 1..9, row ranges, a padded ldy; the dispatched and the AVX2 table),
// and MatMulF32 against an fp64 dot of dequantized rows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if __has_include(<sys/mman.h>)
#include <sys/mman.h>
#include <unistd.h>
#endif

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
      CHECK(y[tk * ldy] == -7.0f);         // outside [r0, r1): untouched
      CHECK(y[tk * ldy + rows] == -7.0f);  // padding: untouched
      for (int64_t r = 1; r < rows; ++r) {
        const void* wr = w.data() + r * mv.row_bytes;
        const void* xr = x.data() + tk * xb;
        const double want = ref::VecDot(t, at, cols, wr, xr);
        const double tol = 2e-5 * AbsDot(t, at, wr, xr, cols) + 1e-6;
        if (std::fabs(y[tk * ldy + r] - want) > tol) ++bad;
      }
    }
    INFO("isa " << std::string(KernelIsa()) << " type " << std::string(Info(t).name) << " x "
                << std::string(Info(at).name) << " rows " << rows << " cols " << cols
                << " n_tokens " << n_tokens);
    CHECK(bad == 0);
  }
}

// Row lengths with 1..4 blocks past a multiple of four, so every tail of the
// decode kernels (pairs, groups of four) is taken.
void CheckAllTypes(ActPrecision p, std::mt19937& rng) {
  for (DType t :
       {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kF32, DType::kF16, DType::kBF16}) {
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

// The decode kernels on many rows: the Q8_0 head and the Q4_1 shapes.
TEST_CASE("decode path on model-sized matrices") {
  std::mt19937 rng(25);
  testing::ForEachSimdTable([&] {
    INFO("isa = " << KernelIsa());
    for (ActPrecision p : {ActPrecision::kSplit16, ActPrecision::kInt8}) {
      CheckMatMulQuantized(DType::kQ8_0, p, 515, 576, rng);
      CheckMatMulQuantized(DType::kQ8_0, p, 67, 1536, rng);
      CheckMatMulQuantized(DType::kQ4_1, p, 301, 576, rng);
      CheckMatMulQuantized(DType::kQ4_1, p, 67, 1536, rng);
    }
  });
}

#if __has_include(<sys/mman.h>)
// The decode kernels read no byte past a weight row: the matrix ends where an
// inaccessible page begins (a read past it faults), for every row length that
// ends in a different tail (1..6 and 18 blocks, 48 blocks) and both precisions;
// the results must also be bit for bit those of the same matrix elsewhere.
TEST_CASE("decode kernels read nothing past the last weight row") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t map_bytes = 16 * page;
  void* map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(map != MAP_FAILED);
  auto* base = static_cast<uint8_t*>(map);
  uint8_t* guard = base + map_bytes - page;
  REQUIRE(mprotect(guard, page, PROT_NONE) == 0);
  std::mt19937 rng(28);
  testing::ForEachSimdTable([&] {
    for (ActPrecision p : {ActPrecision::kInt8, ActPrecision::kSplit16}) {
      for (DType t : {DType::kQ4_1, DType::kQ8_0}) {
        for (int64_t cols : {32, 64, 96, 128, 160, 192, 576, 1536}) {
          const int64_t rows = 5;
          const DType at = ActivationType(t, p);
          const std::vector<uint8_t> w = RandomWeights(rng, t, rows, cols);
          REQUIRE(w.size() <= map_bytes - page);
          uint8_t* at_end = guard - w.size();
          std::memcpy(at_end, w.data(), w.size());
          const MatrixView mv{t, rows, cols, w.data(), RowBytes(t, cols)};
          const MatrixView mv_end{t, rows, cols, at_end, RowBytes(t, cols)};
          for (int n_tokens : {1, 2, 5}) {
            size_t xb;
            const std::vector<uint8_t> x = RandomActivations(rng, at, n_tokens, cols, &xb);
            std::vector<float> want(static_cast<size_t>(rows * n_tokens));
            std::vector<float> got(want.size());
            MatMulQuantized(mv, at, x.data(), xb, n_tokens, 0, rows, want.data(), rows);
            MatMulQuantized(mv_end, at, x.data(), xb, n_tokens, 0, rows, got.data(), rows);
            INFO("isa " << std::string(KernelIsa()) << " type " << std::string(Info(t).name)
                        << " x " << std::string(Info(at).name) << " cols " << cols << " n_tokens "
                        << n_tokens);
            CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  });
  munmap(map, map_bytes);
}
#endif

// Batch invariance: y[r, t] must be bit for bit the same whatever the batch
// size, the token's place in the batch and the row range that computes it.
// A pool of 20 activation rows; batches of n = 1..20 of them in rotated order,
// each over several row splits, against each token alone over all rows.
void CheckBatchInvariance(DType t, ActPrecision p, int64_t rows, int64_t cols, std::mt19937& rng) {
  const DType at = ActivationType(t, p);
  const std::vector<uint8_t> w = RandomWeights(rng, t, rows, cols);
  const MatrixView mv{t, rows, cols, w.data(), RowBytes(t, cols)};
  constexpr int kPool = 20;
  size_t xb;
  const std::vector<uint8_t> pool = RandomActivations(rng, at, kPool, cols, &xb);
  std::vector<float> alone(static_cast<size_t>(kPool * rows));
  for (int k = 0; k < kPool; ++k)
    MatMulQuantized(mv, at, pool.data() + k * xb, xb, 1, 0, rows, alone.data() + k * rows, rows);
  int bad = 0, checked = 0;
  for (int n = 1; n <= kPool; ++n) {
    const int shift = (7 * n) % kPool;  // token i of the batch is pool row (i + shift) % kPool
    std::vector<uint8_t> x(xb * n);
    for (int i = 0; i < n; ++i)
      std::memcpy(x.data() + i * xb, pool.data() + ((i + shift) % kPool) * xb, xb);
    // Row splits: all rows; two threads' halves (16-aligned); odd cut points.
    const int64_t half = std::min<int64_t>(rows, (rows / 2 + 15) / 16 * 16);
    const std::vector<int64_t> cuts[] = {{0, rows}, {0, half, rows}, {0, 1, 4, rows / 3 + 1, rows}};
    for (const std::vector<int64_t>& c : cuts) {
      std::vector<float> y(static_cast<size_t>(n * rows), -1.0f);
      for (size_t k = 0; k + 1 < c.size(); ++k)
        MatMulQuantized(mv, at, x.data(), xb, n, c[k], c[k + 1], y.data(), rows);
      for (int i = 0; i < n; ++i) {
        const float* want = alone.data() + ((i + shift) % kPool) * rows;
        for (int64_t r = 0; r < rows; ++r) {
          ++checked;
          if (std::memcmp(&y[i * rows + r], &want[r], sizeof(float)) != 0) ++bad;
        }
      }
    }
  }
  INFO("isa " << std::string(KernelIsa()) << " type " << std::string(Info(t).name) << " x "
              << std::string(Info(at).name) << " rows " << rows << " cols " << cols);
  CHECK(checked > 0);
  CHECK(bad == 0);
}

TEST_CASE("MatMulQuantized is bitwise batch invariant") {
  std::mt19937 rng(26);
  auto all = [&](ActPrecision p) {
    for (DType t :
         {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kF32, DType::kF16, DType::kBF16}) {
      CheckBatchInvariance(t, p, 37, 576, rng);  // 18 blocks: the Q4_1 pair tail
      CheckBatchInvariance(t, p, 19, 160, rng);  // 5 blocks
      CheckBatchInvariance(t, p, 21, 224, rng);  // 7 blocks
    }
    // Every tail of the 512-bit decode kernels: 1..4 blocks, 9, 10 (a pair
    // tail after whole groups), 48.
    for (DType t : {DType::kQ4_1, DType::kQ8_0}) {
      for (int64_t cols : {32, 64, 96, 128, 288, 320}) CheckBatchInvariance(t, p, 19, cols, rng);
      CheckBatchInvariance(t, p, 33, 1536, rng);
    }
    for (DType t : {DType::kQ4_K, DType::kQ6_K}) CheckBatchInvariance(t, p, 19, 512, rng);
  };
  testing::ForEachSimdTable([&] {
    all(ActPrecision::kSplit16);  // the default precision
    all(ActPrecision::kInt8);
  });
  const bool before = ForceScalarKernels(true);
  all(ActPrecision::kSplit16);
  ForceScalarKernels(before);
}

// MatMulF32 (the exact path): the same bits for any batch and row range.
TEST_CASE("MatMulF32 is bitwise batch invariant") {
  std::mt19937 rng(27);
  for (DType t : {DType::kF32, DType::kQ4_1, DType::kQ8_0, DType::kQ6_K}) {
    const int64_t rows = 19, cols = 512;
    const std::vector<uint8_t> w = RandomWeights(rng, t, rows, cols);
    const MatrixView mv{t, rows, cols, w.data(), RowBytes(t, cols)};
    const std::vector<float> pool = RandomFloats(rng, 20 * cols);
    std::vector<float> scratch(cols), alone(20 * rows);
    for (int k = 0; k < 20; ++k)
      MatMulF32(mv, &pool[k * cols], 1, 0, rows, &alone[k * rows], rows, scratch.data());
    int bad = 0;
    for (int n = 1; n <= 20; ++n) {
      const int shift = (3 * n) % 20;
      std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
      for (int i = 0; i < n; ++i)
        std::memcpy(&x[i * cols], &pool[((i + shift) % 20) * cols], cols * sizeof(float));
      MatMulF32(mv, x.data(), n, 0, 5, y.data(), rows, scratch.data());
      MatMulF32(mv, x.data(), n, 5, rows, y.data(), rows, scratch.data());
      for (int i = 0; i < n; ++i)
        for (int64_t r = 0; r < rows; ++r)
          if (std::memcmp(&y[i * rows + r], &alone[((i + shift) % 20) * rows + r], 4) != 0) ++bad;
    }
    INFO("type " << std::string(Info(t).name));
    CHECK(bad == 0);
  }
}

TEST_CASE("MatMulF32 is the exact path") {
  std::mt19937 rng(23);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ8_0,
                  DType::kQ4_K, DType::kQ6_K}) {
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
