// Type table, fp16/bf16 conversions, quantize -> dequantize error bounds, the
// split 16-bit quantizers (bit-exact SIMD, exact sums), and every dispatched
// VecDot (both activation precisions, dispatched and AVX2 tables) against the
// scalar reference.
#include "kernels/quant.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

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
  CHECK(Info(DType::kQ5_0).block_bytes == 22);
  CHECK(Info(DType::kQ5_0).block_elems == 32);
  CHECK(std::string(Info(DType::kQ5_0).name) == "q5_0");
  CHECK(GetDTypeInfo(7) == nullptr);  // Q5_1: not supported
  CHECK(GetDTypeInfo(4) == nullptr);  // removed id
  CHECK(GetDTypeInfo(999) == nullptr);
  CHECK(RowBytes(DType::kQ4_1, 576) == 18 * 20);
  // Braid-internal split 16-bit activation types.
  CHECK(Info(DType::kQ16_0).block_bytes == 68);
  CHECK(Info(DType::kQ16_1).block_bytes == 72);
  CHECK(Info(DType::kQ16_K).block_bytes == 580);
  CHECK(Info(DType::kQ16_K).block_elems == 256);
  CHECK(GetDTypeInfo(1003) == nullptr);
}

TEST_CASE("activation-only types are flagged for weight-file readers") {
  for (DType t : {DType::kQ8_1, DType::kQ8_K, DType::kQ16_0, DType::kQ16_1, DType::kQ16_K}) {
    CHECK(IsActivationOnly(t));
  }
  for (DType t : kWeightTypes) CHECK_FALSE(IsActivationOnly(t));
  CHECK_FALSE(IsActivationOnly(DType::kQ5_0));  // a weight type, repacked as Q8_0 for matmuls
  CHECK(IsActivationOnly(5000u));
}

TEST_CASE("e4m3 values: every byte against the format's definition and fp16") {
  // Every e4m3 value is an fp16 value: its bits shifted into an fp16's
  // (exponent bias 15 against 7) give the value times 2^-8 as a half.
  for (int b = 0; b < 256; ++b) {
    const float f = Fp8E4M3ToFp32(static_cast<uint8_t>(b));
    if ((b & 0x7f) == 0x7f) {
      CHECK(std::isnan(f));
      continue;
    }
    const uint16_t h = static_cast<uint16_t>(((b & 0x80) << 8) | ((b & 0x7f) << 7));
    CHECK(f == std::ldexp(Fp16ToFp32(h), 8));
  }
  CHECK(Fp8E4M3ToFp32(0x38) == 1.0f);
  CHECK(Fp8E4M3ToFp32(0x7e) == 448.0f);
  CHECK(Fp8E4M3ToFp32(0x01) == std::ldexp(1.0f, -9));
  CHECK(Fp8E4M3ToFp32(0xb8) == -1.0f);
  const uint8_t row[3] = {0x38, 0x40, 0xc4};
  float out[3];
  ref::DequantizeRow(DType::kF8_E4M3, row, out, 3);
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == 2.0f);
  CHECK(out[2] == -3.0f);
  CHECK(IsActivationOnly(DType::kF8_E4M3));  // never a GGUF weight type
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
  CHECK(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie -> even
  CHECK(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie -> even (up)
  CHECK(Fp32ToFp16(70000.0f) == 0x7C00);                          // overflow -> inf
  CHECK(Bf16ToFp32(Fp32ToBf16(1.5f)) == 1.5f);
  CHECK(Fp32ToBf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);  // tie -> even
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
  // Split 16-bit: |err| <= d/2 with d = amax/16256 (fp32 d; the rest is fp32 rounding).
  for (DType t : {DType::kQ16_0, DType::kQ16_1, DType::kQ16_K}) {
    INFO("type " << std::string(Info(t).name));
    const QuantError e = Roundtrip(t, x, true);
    CHECK(e.max_err_over_amax <= 0.5 / 16256.0 + 2e-7);
    CHECK(e.rel_rms < 3.5e-5);  // uniform x: (d / sqrt(12)) / rms(x) = 3.1e-5
    // Wide dynamic range inside a block (the scale follows the block maximum).
    std::vector<float> wide = x;
    for (size_t i = 0; i < wide.size(); i += 7) wide[i] *= 1000.0f;
    CHECK(Roundtrip(t, wide, true).max_err_over_amax <= 0.5 / 16256.0 + 2e-7);
  }
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

// The stored q16 of element j of a split 16-bit row.
int StoredQ16(DType t, const std::vector<uint8_t>& q, int64_t j) {
  const int be = Info(t).block_elems;
  const uint8_t* b = q.data() + (j / be) * Info(t).block_bytes;
  const int hi_off = t == DType::kQ16_1 ? 8 : 4;
  const auto hi = static_cast<int8_t>(b[hi_off + j % be]);
  const auto lo = static_cast<int8_t>(b[hi_off + be + j % be]);
  return 128 * hi + lo;
}

TEST_CASE("split 16-bit quantization: rounding, the hi/lo split and the sums") {
  // amax = 16256 makes d = 1, so q16 = round(x) with ties to even.
  std::vector<float> x(256, 0.0f);
  const float v[] = {16256.0f, -16256.0f, 2.5f,  3.5f,   -2.5f,    64.0f, -64.0f,
                     192.0f,   -192.0f,   63.0f, -65.0f, 16255.0f, 0.49f};
  const int want[] = {16256, -16256, 2, 4, -2, 64, -64, 192, -192, 63, -65, 16255, 0};
  for (size_t i = 0; i < std::size(v); ++i) x[i] = x[i + 32] = x[i + 64] = v[i];
  for (DType t : {DType::kQ16_0, DType::kQ16_1, DType::kQ16_K}) {
    INFO("type " << std::string(Info(t).name));
    std::vector<uint8_t> q(RowBytes(t, 256));
    QuantizeActivations(t, x.data(), q.data(), 256);
    for (size_t i = 0; i < std::size(v); ++i)
      CHECK(StoredQ16(t, q, static_cast<int64_t>(i)) == want[i]);
    // hi = floor((q16 + 64) / 128) in [-127, 127], lo in [-64, 63].
    const int hi_off = t == DType::kQ16_1 ? 8 : 4;
    const int be = Info(t).block_elems;
    for (int64_t j = 0; j < 256; ++j) {
      const uint8_t* b = q.data() + (j / be) * Info(t).block_bytes;
      const int hi = static_cast<int8_t>(b[hi_off + j % be]);
      const int lo = static_cast<int8_t>(b[hi_off + be + j % be]);
      CHECK(hi >= -127);
      CHECK(hi <= 127);
      CHECK(lo >= -64);
      CHECK(lo <= 63);
    }
  }
  // An all-zero block stores d = 0 and zeros.
  std::vector<float> z(32, 0.0f);
  std::vector<uint8_t> qz(RowBytes(DType::kQ16_0, 32), 0xAB);
  QuantizeActivations(DType::kQ16_0, z.data(), qz.data(), 32);
  for (uint8_t byte : qz) CHECK(byte == 0);
}

TEST_CASE("split 16-bit sums are exact: Q16_1 sum, Q16_K bsums") {
  std::mt19937 rng(4);
  const std::vector<float> x = RandomFloats(rng, 512);
  std::vector<uint8_t> q1(RowBytes(DType::kQ16_1, 512)), qk(RowBytes(DType::kQ16_K, 512));
  QuantizeActivations(DType::kQ16_1, x.data(), q1.data(), 512);
  QuantizeActivations(DType::kQ16_K, x.data(), qk.data(), 512);
  for (int b = 0; b < 512 / 32; ++b) {
    int32_t stored;
    std::memcpy(&stored, q1.data() + 72 * b + 4, 4);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += StoredQ16(DType::kQ16_1, q1, 32 * b + j);
    CHECK(stored == sum);
  }
  for (int b = 0; b < 2; ++b) {
    for (int g = 0; g < 16; ++g) {
      int32_t stored;
      std::memcpy(&stored, qk.data() + 580 * b + 4 + 512 + 4 * g, 4);
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += StoredQ16(DType::kQ16_K, qk, 256 * b + 16 * g + l);
      CHECK(stored == sum);
    }
  }
}

TEST_CASE("SIMD activation quantization is bit-identical to the reference") {
  std::mt19937 rng(5);
  testing::ForEachSimdTable([&] {
    for (DType t : {DType::kQ16_0, DType::kQ16_1, DType::kQ16_K, DType::kQ8_0, DType::kQ8_1}) {
      for (int64_t n : {256, 576, 1536}) {  // 576: 16 blocks and 2 more
        for (float scale : {1.0f, 1e-3f, 37.0f}) {
          std::vector<float> x = RandomFloats(rng, n, -scale, scale);
          for (int64_t i = 0; i < 32; ++i) x[i] = 0.0f;  // one all-zero block (Q16_0/1)
          // A block whose step is exactly 1 (amax 127): ties at +-k.5 round away from zero.
          const float ties[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.4999999f, -126.5f, 0.49999997f};
          for (int64_t i = 0; i < 32; ++i)
            x[32 + i] = ties[i % 8] + (i % 8 == 0 ? 0.0f : static_cast<float>(i / 8));
          // Q8: a NaN is left out of the block's scale and quantized to -127.
          if (t == DType::kQ8_0 || t == DType::kQ8_1) x[70] = std::nanf("");
          std::vector<uint8_t> fast(RowBytes(t, n)), want(RowBytes(t, n));
          QuantizeActivations(t, x.data(), fast.data(), n);
          ref::QuantizeActivations(t, x.data(), want.data(), n);
          INFO("isa " << std::string(KernelIsa()) << " type " << std::string(Info(t).name) << " n "
                      << n);
          CHECK(fast == want);
        }
      }
    }
  });
}

std::vector<int64_t> SizesFor(DType t) {
  const int be = Info(ActivationType(t)).block_elems;  // same at either precision
  if (be == 1) return {1, 7, 8, 33, 576, 1536};
  if (be == 32) return {32, 64, 96, 576, 1536};
  return {256, 512, 1536};
}

const ActPrecision kPrecisions[] = {ActPrecision::kInt8, ActPrecision::kSplit16};

TEST_CASE("VecDot (dispatched) matches the scalar reference") {
  std::mt19937 rng(11);
  testing::ForEachSimdTable([&] {
    INFO("isa = " << KernelIsa());
    for (ActPrecision p : kPrecisions) {
      for (DType t : kWeightTypes) {
        const DType at = ActivationType(t, p);
        for (int64_t n : SizesFor(t)) {
          for (int trial = 0; trial < 4; ++trial) {
            const std::vector<uint8_t> w = RandomWeights(rng, t, 1, n);
            size_t xb;
            const std::vector<uint8_t> x = RandomActivations(rng, at, 1, n, &xb);
            const float fast = VecDot(t, at, n, w.data(), x.data());
            const float ref = ref::VecDot(t, at, n, w.data(), x.data());
            // Integer block sums are exact; only the fp32 combination order differs.
            const double tol = 2e-5 * AbsDot(t, at, w.data(), x.data(), n) + 1e-6;
            INFO("type " << std::string(Info(t).name) << " x " << std::string(Info(at).name)
                         << " n " << n);
            CHECK(std::fabs((double)fast - ref) <= tol);
          }
        }
      }
    }
  });
}

TEST_CASE("VecDot reference agrees with a dequantized fp64 dot") {
  // Checks the reference itself: integer-domain math == dot of dequantized rows.
  std::mt19937 rng(12);
  for (ActPrecision p : kPrecisions) {
    for (DType t : kWeightTypes) {
      const DType at = ActivationType(t, p);
      const int64_t n = Info(at).block_elems == 256 ? 512 : 576;
      const std::vector<uint8_t> w = RandomWeights(rng, t, 1, n);
      size_t xb;
      const std::vector<uint8_t> x = RandomActivations(rng, at, 1, n, &xb);
      std::vector<float> a(n), b(n);
      ref::DequantizeRow(t, w.data(), a.data(), n);
      ref::DequantizeRow(at, x.data(), b.data(), n);
      double exact = 0;
      for (int64_t i = 0; i < n; ++i) exact += (double)a[i] * b[i];
      const double tol = 1e-5 * AbsDot(t, at, w.data(), x.data(), n) + 1e-6;
      INFO("type " << std::string(Info(t).name) << " x " << std::string(Info(at).name));
      CHECK(std::fabs(ref::VecDot(t, at, n, w.data(), x.data()) - exact) <= tol);
    }
  }
}

// The point of the split 16-bit types: against the unquantized activations, the
// dot's error is the weight's own plus ~1/16256 of the activations' scale, not 1/127.
TEST_CASE("split 16-bit activations make the dot ~100x more accurate than int8") {
  std::mt19937 rng(14);
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t n = 1536;
    double err8 = 0, err16 = 0;
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<uint8_t> w = RandomWeights(rng, t, 1, n);
      const std::vector<float> x = RandomFloats(rng, n);
      std::vector<float> a(n);
      ref::DequantizeRow(t, w.data(), a.data(), n);
      double exact = 0;  // dequantized weights . unquantized activations
      for (int64_t i = 0; i < n; ++i) exact += (double)a[i] * x[i];
      for (ActPrecision p : kPrecisions) {
        const DType at = ActivationType(t, p);
        std::vector<uint8_t> xq(RowBytes(at, n));
        QuantizeActivations(at, x.data(), xq.data(), n);
        const double e = std::fabs(VecDot(t, at, n, w.data(), xq.data()) - exact);
        (p == ActPrecision::kInt8 ? err8 : err16) += e * e;
      }
    }
    INFO("type " << std::string(Info(t).name) << " rms err int8 " << std::sqrt(err8 / 20)
                 << " split16 " << std::sqrt(err16 / 20));
    CHECK(err16 * 50 * 50 < err8);
  }
}

TEST_CASE("ForceScalarKernels switches VecDot to the reference") {
  std::mt19937 rng(13);
  const bool before = ForceScalarKernels(true);
  CHECK(std::string(KernelIsa()) == "scalar");
  for (ActPrecision p : kPrecisions) {
    for (DType t : kWeightTypes) {
      const DType at = ActivationType(t, p);
      const int64_t n = 512;
      const std::vector<uint8_t> w = RandomWeights(rng, t, 1, n);
      size_t xb;
      const std::vector<uint8_t> x = RandomActivations(rng, at, 1, n, &xb);
      CHECK(VecDot(t, at, n, w.data(), x.data()) == ref::VecDot(t, at, n, w.data(), x.data()));
    }
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
  CHECK(ActivationType(DType::kQ4_1, ActPrecision::kInt8) == DType::kQ8_1);
  CHECK(ActivationType(DType::kQ4_0, ActPrecision::kSplit16) == DType::kQ16_0);
  CHECK(ActivationType(DType::kQ8_0, ActPrecision::kSplit16) == DType::kQ16_0);
  CHECK(ActivationType(DType::kQ4_1, ActPrecision::kSplit16) == DType::kQ16_1);
  CHECK(ActivationType(DType::kQ4_K, ActPrecision::kSplit16) == DType::kQ16_K);
  CHECK(ActivationType(DType::kQ6_K, ActPrecision::kSplit16) == DType::kQ16_K);
  CHECK(ActivationType(DType::kF16, ActPrecision::kSplit16) == DType::kF32);
  CHECK(ActivationType(DType::kF32, ActPrecision::kSplit16) == DType::kF32);
}

}  // namespace
}  // namespace braid::kernels
