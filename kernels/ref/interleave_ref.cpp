// The interleaved weight layout (kernels/matmul.h: WeightLayout::kInterleaved16)
// and its scalar matmul, the bit-exact reference of the SIMD group kernels.
//
// Rows are taken 16 at a time (a row group; the last one padded with zero
// rows). A group of a matrix with nb blocks per row is, block after block,
//   [quants of block b][scales of block b]
// (one stream, so a decode pass reads and prefetches it in order)
// Q4_1: quants 256 bytes per block: four 64-byte chunks j = 0..3, chunk j
//       holding bytes qs[4j..4j+3] of rows 0..15 (row r at 4r); the low
//       nibbles are elements 4j..4j+3, the high nibbles 16+4j..16+4j+3.
//       Scales 64 bytes: d of rows 0..15 (fp16), then m of rows 0..15.
// Q8_0: quants 512 bytes per block: eight chunks j = 0..7, chunk j holding
//       qs[4j..4j+3] + 128 (as unsigned bytes) of rows 0..15.
//       Scales 32 bytes: d of rows 0..15 (fp16).
// So a group takes exactly 16 rows' worth of the original bytes.
//
// For each row and token the result is, over blocks b in order,
//   Q4_1: acc = fma(float(isum_b), dw_b * dx_b, acc); acc = fma(mw_b, sx_b, acc)
//   Q8_0: acc = fma(float(isum_b), dw_b * dx_b, acc)
// with isum_b the exact integer dot of the block (int8: w . q; split 16-bit:
// w . (128 hi + lo)), dx_b the activation block's scale, sx_b = dx_b * sum(q)
// in fp32; acc starts at 0. The SIMD kernels compute every (row, token) with
// exactly these fp32 operations, whatever the number of tokens.
#include <cmath>
#include <cstring>

#include "ref/blocks.h"
#include "ref/ref.h"

namespace braid::kernels::ref {
namespace {

constexpr int kGroup = 16;

// Activation block b of a quantized row: scale, min-term scale sx = dx * sum, the
// exact int dot with 32 weight values `w` (w[i] for element i).
struct ActBlock {
  float dx, sx;
  int64_t dot;
};

ActBlock Act(DType act, const void* xq, int64_t b, const int32_t* w) {
  ActBlock a{};
  int64_t sum = 0, dot = 0;
  switch (act) {
    case DType::kQ8_0: {
      const auto& x = static_cast<const BlockQ8_0*>(xq)[b];
      a.dx = Fp16ToFp32(x.d);
      for (int i = 0; i < kQK; ++i) {
        sum += x.qs[i];
        dot += int64_t{w[i]} * x.qs[i];
      }
      break;
    }
    case DType::kQ8_1: {
      const auto& x = static_cast<const BlockQ8_1*>(xq)[b];
      a.dx = Fp16ToFp32(x.d);
      for (int i = 0; i < kQK; ++i) {
        sum += x.qs[i];
        dot += int64_t{w[i]} * x.qs[i];
      }
      break;
    }
    case DType::kQ16_0: {
      const auto& x = static_cast<const BlockQ16_0*>(xq)[b];
      a.dx = x.d;
      for (int i = 0; i < kQK; ++i) {
        sum += Q16(x.hi, x.lo, i);
        dot += int64_t{w[i]} * Q16(x.hi, x.lo, i);
      }
      break;
    }
    case DType::kQ16_1: {
      const auto& x = static_cast<const BlockQ16_1*>(xq)[b];
      a.dx = x.d;
      for (int i = 0; i < kQK; ++i) {
        sum += Q16(x.hi, x.lo, i);
        dot += int64_t{w[i]} * Q16(x.hi, x.lo, i);
      }
      break;
    }
    default:
      break;
  }
  a.sx = a.dx * static_cast<float>(sum);
  a.dot = dot;
  return a;
}

size_t QuantBytes(DType t) { return t == DType::kQ4_1 ? 256 : 512; }
size_t ScaleBytes(DType t) { return t == DType::kQ4_1 ? 64 : 32; }

}  // namespace

bool Interleavable(DType type) { return type == DType::kQ4_1 || type == DType::kQ8_0; }

size_t InterleavedGroupBytes(DType type, int64_t cols) {
  return static_cast<size_t>(cols / kQK) * (QuantBytes(type) + ScaleBytes(type));
}

void Interleave(DType type, const void* src, size_t row_bytes, int64_t rows, int64_t cols,
                void* dst) {
  const int64_t nb = cols / kQK;
  const int64_t groups = (rows + kGroup - 1) / kGroup;
  const size_t gbytes = InterleavedGroupBytes(type, cols);
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, gbytes * static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* group = out + gbytes * g;
    for (int r = 0; r < kGroup && g * kGroup + r < rows; ++r) {
      const auto* row = static_cast<const uint8_t*>(src) + row_bytes * (g * kGroup + r);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* quants = group + (QuantBytes(type) + ScaleBytes(type)) * b;
        uint8_t* scales = quants + QuantBytes(type);
        if (type == DType::kQ4_1) {
          const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
          for (int j = 0; j < 4; ++j) std::memcpy(quants + 64 * j + 4 * r, blk.qs + 4 * j, 4);
          std::memcpy(scales + 2 * r, &blk.d, 2);
          std::memcpy(scales + 32 + 2 * r, &blk.m, 2);
        } else {
          const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
          for (int j = 0; j < 8; ++j)
            for (int k = 0; k < 4; ++k)
              quants[64 * j + 4 * r + k] = static_cast<uint8_t>(blk.qs[4 * j + k] ^ 0x80);
          std::memcpy(scales + 2 * r, &blk.d, 2);
        }
      }
    }
  }
}

void MatMulInterleaved(DType type, const void* w, int64_t cols, DType act, const void* xq,
                       size_t xq_row_bytes, int n_tokens, int64_t r0, int64_t r1, float* y,
                       int64_t ldy) {
  const int64_t nb = cols / kQK;
  const size_t gbytes = InterleavedGroupBytes(type, cols);
  const bool q4 = type == DType::kQ4_1;
  for (int64_t r = r0; r < r1; ++r) {
    const auto* group = static_cast<const uint8_t*>(w) + gbytes * (r / kGroup);
    const int lane = static_cast<int>(r % kGroup);
    for (int t = 0; t < n_tokens; ++t) {
      const auto* x = static_cast<const uint8_t*>(xq) + xq_row_bytes * t;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* quants = group + (QuantBytes(type) + ScaleBytes(type)) * b;
        const uint8_t* scales = quants + QuantBytes(type);
        int32_t wv[kQK];
        uint16_t d16, m16 = 0;
        if (q4) {
          for (int j = 0; j < 4; ++j)
            for (int k = 0; k < 4; ++k) {
              const uint8_t byte = quants[64 * j + 4 * lane + k];
              wv[4 * j + k] = byte & 0x0F;
              wv[16 + 4 * j + k] = byte >> 4;
            }
          std::memcpy(&d16, scales + 2 * lane, 2);
          std::memcpy(&m16, scales + 32 + 2 * lane, 2);
        } else {
          for (int j = 0; j < 8; ++j)
            for (int k = 0; k < 4; ++k) wv[4 * j + k] = quants[64 * j + 4 * lane + k] - 128;
          std::memcpy(&d16, scales + 2 * lane, 2);
        }
        const ActBlock a = Act(act, x, b, wv);
        const float dw = Fp16ToFp32(d16);
        acc = std::fma(static_cast<float>(a.dot), dw * a.dx, acc);
        if (q4) acc = std::fma(Fp16ToFp32(m16), a.sx, acc);
      }
      y[t * ldy + r] = acc;
    }
  }
}

}  // namespace braid::kernels::ref
