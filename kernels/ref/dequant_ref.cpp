// Scalar dequantization of every supported type, operation for operation as
// ggml's dequantize_row_* (so results are bit-identical to ggml and to the
// `gguf` Python package; tests/fixtures/dequant checks that).
#include <cassert>
#include <cstring>

#include "ref/blocks.h"
#include "ref/ref.h"

namespace braid::kernels::ref {
namespace {

// x: n/32 blocks -> y: [n]
void DequantQ4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      y[i * kQK + j] = static_cast<float>(x0) * d;
      y[i * kQK + j + kQK / 2] = static_cast<float>(x1) * d;
    }
  }
}

void DequantQ4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float m = Fp16ToFp32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[i * kQK + j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[i * kQK + j + kQK / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

// The 5th bit of element j is bit j of qh (a little-endian uint32): moved to
// bit 4 as ggml does, (qh >> j) << 4 for the low half and qh >> (j + 12) for j+16.
void DequantQ5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK / 2; ++j) {
      const int xh0 = static_cast<int>(((qh >> j) << 4) & 0x10);
      const int xh1 = static_cast<int>((qh >> (j + 12)) & 0x10);
      const int x0 = ((x[i].qs[j] & 0x0F) | xh0) - 16;
      const int x1 = ((x[i].qs[j] >> 4) | xh1) - 16;
      y[i * kQK + j] = static_cast<float>(x0) * d;
      y[i * kQK + j + kQK / 2] = static_cast<float>(x1) * d;
    }
  }
}

void DequantQ8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void DequantQ8_1(const BlockQ8_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// Each 64-element chunk: 32 qs bytes, low nibbles scaled by sub-block 2c, high by 2c+1.
void DequantQ4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const float dmin = Fp16ToFp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int j = 0; j < kQKK; j += 64) {
      uint8_t sc, m;
      Q4KScaleMin(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = dmin * m;
      Q4KScaleMin(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void DequantQ6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void DequantQ8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int j = 0; j < kQKK; ++j) y[i * kQKK + j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

// x = d * (128 * hi + lo), blocks of `B` elements.
template <typename Block, int B>
void DequantQ16(const Block* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / B; ++i) {
    for (int j = 0; j < B; ++j)
      y[i * B + j] = x[i].d * static_cast<float>(Q16(x[i].hi, x[i].lo, j));
  }
}

}  // namespace

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto* b = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(b[i]);
      return;
    }
    case DType::kF8_E4M3: {
      const auto* b = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp8E4M3ToFp32(b[i]);
      return;
    }
    case DType::kQ4_0:
      return DequantQ4_0(static_cast<const BlockQ4_0*>(src), dst, n);
    case DType::kQ4_1:
      return DequantQ4_1(static_cast<const BlockQ4_1*>(src), dst, n);
    case DType::kQ5_0:
      return DequantQ5_0(static_cast<const BlockQ5_0*>(src), dst, n);
    case DType::kQ8_0:
      return DequantQ8_0(static_cast<const BlockQ8_0*>(src), dst, n);
    case DType::kQ8_1:
      return DequantQ8_1(static_cast<const BlockQ8_1*>(src), dst, n);
    case DType::kQ4_K:
      return DequantQ4_K(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::kQ6_K:
      return DequantQ6_K(static_cast<const BlockQ6_K*>(src), dst, n);
    case DType::kQ8_K:
      return DequantQ8_K(static_cast<const BlockQ8_K*>(src), dst, n);
    case DType::kQ16_0:
      return DequantQ16<BlockQ16_0, kQK>(static_cast<const BlockQ16_0*>(src), dst, n);
    case DType::kQ16_1:
      return DequantQ16<BlockQ16_1, kQK>(static_cast<const BlockQ16_1*>(src), dst, n);
    case DType::kQ16_K:
      return DequantQ16<BlockQ16_K, kQKK>(static_cast<const BlockQ16_K*>(src), dst, n);
  }
  assert(false && "DequantizeRow: unsupported type");
}

}  // namespace braid::kernels::ref
