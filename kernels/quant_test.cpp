// Type table, fp16/bf16 conversions, quantize -> dequantize error bounds, and
// every dispatched VecDot against the scalar reference.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/quant.h"
#include "ref/ref.h"
#include "test_util.h"

namespace braid::kernels {
namespace {

using testing::AbsDot;
using testing::RandomActivations;
using testing::RandomFloats;
using testing::RandomWeights;

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                              DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K};

TEST_CASE("GetDTypeInfo has ggml's block sizes") {
  CHECK(Info(DType::kQ4_0).block_bytes == 18);
  CHECK(Info(DType::kQ4_1).block_bytes == 20);
  CHECK(Info(DType::kQ8_0).block_bytes == 34);
  CHECK(Info(DType::kQ8_1).block_bytes == 36);
  CHECK(Info(DType::kQ4_K).block_bytes == 144);
  CHECK(Info(DType::kQ6_K).block_bytes == 210);
  CHECK(Info(DType::kQ8_K).block_bytes == 292);
  CHECK(Info(DType::kQ4_K).block_elems == 256);
  CHECK(Info(DType::kBF16).block_bytes == 2);
  CHECK(GetDTypeInfo(6) == nullptr);   // Q5_0: not supported
  CHECK(GetDTypeInfo(4) == nullptr);   // removed id
  CHECK(GetDTypeInfo(999) == nullptr);
  CHECK(RowBytes(DType::kQ4_1, 576) == 18 * 20);
}

TEST_CASE("fp16 round trip is exact for every half and rounds to nearest even") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      CHECK((h & 0x7C00) == 0x7C00);
      continue;
    }
    if (Fp32ToFp16(f) != h) ++mismatches;
  }
  CHECK(mismatches == 0);
  CHECK(Fp16ToFp32(0x3C00) == 1.0f);
  CHECK(Fp16ToFp32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);       // tie -> even
  CHECK(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);   // tie -> even (up)
  CHECK(Fp32ToFp16(70000.0f) == 0x7C00);                           // overflow -> inf
  CHECK(Bf16ToFp32(Fp32ToBf16(1.5f)) == 1.5f);
  CHECK(Fp32ToBf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);        // tie -> even
}

// RMS of (dequantize(quantize(x)) - x) relative to RMS of x, and the max error
// relative to each block's absolute maximum.
struct QuantError {
  double rel_rms;
  double max_err_over_amax;
};

QuantError Roundtrip(DType type, const std::vector<float>& x, bool activation) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(RowBytes(type, n));
  if (activation) {
    QuantizeActivations(type, x.data(), q.data(), n);
  } else {
    ref::QuantizeWeights(type, x.data(), q.data(), n);
  }
  std::vector<float> y(x.size());
  DequantizeRow(type, q.data(), y.data(), n);
  const int be = Info(type).block_elems;
  double se = 0, sx = 0, worst = 0;
  for (int64_t b = 0; b < n / be; ++b) {
    double amax = 0;
    for (int j = 0; j < be; ++j) amax = std::max(amax, std::fabs((double)x[b * be + j]));
    for (int j = 0; j < be; ++j) {
      const double e = std::fabs((double)y[b * be + j] - x[b * be + j]);
      se += e * e;
      sx += (double)x[b * be + j] * x[b * be + j];
      if (amax > 0) worst = std::max(worst, e / amax);
    }
  }
  return {std::sqrt(se / sx), worst};
}

TEST_CASE("quantize -> dequantize error bounds") {
  std::mt19937 rng(7);
  const std::vector<float> x = RandomFloats(rng, 1536);
  // Symmetric 8-bit: |err| <= d/2 with d = amax/127, plus the fp16 rounding of d
  // (q * |d - fp16(d)| <= 127 * d * 2^-11).
  const double q8_bound = (0.5 + 127.0 / 2048.0) / 127.0;
  for (DType t : {DType::kQ8_0, DType::kQ8_1}) {
    const QuantError e = Roundtrip(t, x, true);
    CHECK(e.max_err_over_amax <= q8_bound);
    CHECK(e.rel_rms < 0.006);
  }
  const QuantError k8 = Roundtrip(DType::kQ8_K, x, true);
  CHECK(k8.max_err_over_amax <= 0.5 / 127.0 + 1e-6);  // fp32 d
  // Q4_0: step d = amax/8; one-sided clamp at q = 15 can cost a whole step.
  CHECK(Roundtrip(DType::kQ4_0, x, false).max_err_over_amax <= 1.0 / 8.0 * 1.01);
  CHECK(Roundtrip(DType::kQ4_0, x, false).rel_rms < 0.1);
  // Q4_1: step (max - min)/15 <= 2 amax / 15, error half a step (+ fp16 of d and m).
  CHECK(Roundtrip(DType::kQ4_1, x, false).max_err_over_amax <= 2.0 / 15.0 * 0.5 * 1.05);
  CHECK(Roundtrip(DType::kQ4_1, x, false).rel_rms < 0.08);
  CHECK(Roundtrip(DType::kQ8_0, x, false).rel_rms < 0.006);
  // K-quants (our plain min/max quantizer; 6-bit sub-block scales add error).
  CHECK(Roundtrip(DType::kQ4_K, x, false).rel_rms < 0.1);
  CHECK(Roundtrip(DType::kQ6_K, x, false).rel_rms < 0.03);
  CHECK(Roundtrip(DType::kF16, x, false).rel_rms < 1e-3);
  CHECK(Roundtrip(DType::kBF16, x, false).rel_rms < 5e-3);
}

TEST_CASE("Q8_1 stores the exact sum of its quants") {
  std::mt19937 rng(3);
  const std::vector<float> x = RandomFloats(rng, 64);
  std::vector<uint8_t> q(RowBytes(DType::kQ8_1, 64));
  QuantizeActivations(DType::kQ8_1, x.data(), q.data(), 64);
  for (int b = 0; b < 2; ++b) {
    const uint8_t* blk = q.data() + 36 * b;
    int16_t stored;
    std::memcpy(&stored, blk + 2, 2);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(blk[4 + j]);
    CHECK(stored == sum);
  }
}

std::vector<int64_t> SizesFor(DType t) {
  const int be = Info(ActivationType(t)).block_elems;
  if (be == 1) return {1, 7, 8, 33, 576, 1536};
  if (be == 32) return {32, 64, 96, 576, 1536};
  return {256, 512, 1536};
}

TEST_CASE("VecDot (dispatched) matches the scalar reference") {
  INFO("isa = " << KernelIsa());
  std::mt19937 rng(11);
  for (DType t : kWeightTypes) {
    for (int64_t n : SizesFor(t)) {
      for (int trial = 0; trial < 4; ++trial) {
        const std::vector<uint8_t> w = RandomWeights(rng, t, 1, n);
        size_t xb;
        const std::vector<uint8_t> x = RandomActivations(rng, t, 1, n, &xb);
        const float fast = VecDot(t, n, w.data(), x.data());
        const float ref = ref::VecDot(t, n, w.data(), x.data());
        // Integer block sums are exact; only the fp32 combination order differs.
        const double tol = 2e-5 * AbsDot(t, w.data(), x.data(), n) + 1e-6;
        INFO("type " << Info(t).name << " n " << n);
        CHECK(std::fabs((double)fast - ref) <= tol);
      }
    }
  }
}

TEST_CASE("VecDot reference agrees with a dequantized fp64 dot") {
  // Checks the reference itself: integer-domain math == dot of dequantized rows.
  std::mt19937 rng(12);
  for (DType t : kWeightTypes) {
    const int64_t n = Info(ActivationType(t)).block_elems == 256 ? 512 : 576;
    const std::vector<uint8_t> w = RandomWeights(rng, t, 1, n);
    size_t xb;
    const std::vector<uint8_t> x = RandomActivations(rng, t, 1, n, &xb);
    std::vector<float> a(n), b(n);
    ref::DequantizeRow(t, w.data(), a.data(), n);
    ref::DequantizeRow(ActivationType(t), x.data(), b.data(), n);
    double exact = 0;
    for (int64_t i = 0; i < n; ++i) exact += (double)a[i] * b[i];
    // Q4_1's offset term uses s = fp16(d * sum q), rounded to fp16: allow for it.
    const double tol = (t == DType::kQ4_1 ? 2e-3 : 1e-5) * AbsDot(t, w.data(), x.data(), n) + 1e-6;
    INFO("type " << Info(t).name);
    CHECK(std::fabs(ref::VecDot(t, n, w.data(), x.data()) - exact) <= tol);
  }
}

TEST_CASE("ForceScalarKernels switches VecDot to the reference") {
  std::mt19937 rng(13);
  const bool before = ForceScalarKernels(true);
  CHECK(std::string(KernelIsa()) == "scalar");
  for (DType t : kWeightTypes) {
    const int64_t n = 512;
    const std::vector<uint8_t> w = RandomWeights(rng, t, 1, n);
    size_t xb;
    const std::vector<uint8_t> x = RandomActivations(rng, t, 1, n, &xb);
    CHECK(VecDot(t, n, w.data(), x.data()) == ref::VecDot(t, n, w.data(), x.data()));
  }
  ForceScalarKernels(before);
  MESSAGE("dispatched ISA: " << std::string(KernelIsa()));
}

TEST_CASE("ActivationType pairs") {
  CHECK(ActivationType(DType::kQ4_0) == DType::kQ8_0);
  CHECK(ActivationType(DType::kQ8_0) == DType::kQ8_0);
  CHECK(ActivationType(DType::kQ4_1) == DType::kQ8_1);
  CHECK(ActivationType(DType::kQ4_K) == DType::kQ8_K);
  CHECK(ActivationType(DType::kQ6_K) == DType::kQ8_K);
  CHECK(ActivationType(DType::kBF16) == DType::kF32);
}

}  // namespace
}  // namespace braid::kernels
