// Scalar quantization: activations (Q8_0, Q8_1, Q8_K, as ggml's
// quantize_row_*_ref; Braid's split 16-bit Q16_0, Q16_1, Q16_K) and a plain
// min/max weight quantizer for tests and benches.
#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "ref/blocks.h"
#include "ref/ref.h"

namespace braid::kernels::ref {
namespace {

float AbsMax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

// Symmetric 8-bit: d = amax / 127, q = round(x / d) in [-127, 127].
// 8-bit symmetric quantization with an fp16 scale: q is computed against the
// rounded scale, so d16 * q reproduces x to within half a step.
void QuantizeSym8Half(const float* x, int n, uint16_t* d_out, int8_t* q) {
  const uint16_t d16 = Fp32ToFp16(AbsMax(x, n) / 127.0f);
  const float d = Fp16ToFp32(d16);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < n; ++j)
    q[j] = static_cast<int8_t>(std::clamp<long>(std::lround(x[j] * id), -127, 127));
  *d_out = d16;
}

void QuantizeSym8(const float* x, int n, float* d_out, int8_t* q) {
  const float d = AbsMax(x, n) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < n; ++j) q[j] = static_cast<int8_t>(std::lround(x[j] * id));
  *d_out = d;
}

// Split 16-bit: d = amax / 16256, q16 = round(x / d) (nearest even, the SIMD
// conversion's rounding, so the SIMD quantizers match bit for bit), then
// hi = floor((q16 + 64) / 128), lo = q16 - 128 hi. A block whose d is not a
// normal float (all zeros, denormal-tiny, inf or NaN input) is stored as zeros.
// Returns sum(q16).
int QuantizeSplit16(const float* x, int n, float* d_out, int8_t* hi, int8_t* lo) {
  float d = AbsMax(x, n) / static_cast<float>(kQ16Max);
  if (!(d >= FLT_MIN && d <= FLT_MAX)) d = 0.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int sum = 0;
  for (int j = 0; j < n; ++j) {
    // Clamped as the SIMD code clamps its int32 (NaN converts to INT_MIN there).
    const float r = std::nearbyint(x[j] * id);
    const float m = static_cast<float>(kQ16Max);
    const int q = static_cast<int>(r >= -m ? (r <= m ? r : m) : -m);
    const int h = (q + 64) >> 7;  // arithmetic shift: floor
    hi[j] = static_cast<int8_t>(h);
    lo[j] = static_cast<int8_t>(q - 128 * h);
    sum += q;
  }
  *d_out = d;
  return sum;
}

void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  // ggml's quantize_row_q4_0_ref: the largest-magnitude value maps to -8.
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int x1 = std::min(15, static_cast<int>(x[j + kQK / 2] * id + 8.5f));
      y[i].qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
}

void QuantizeQ4_1(const float* x, BlockQ4_1* y, int64_t n) {
  // x ~ d * q + min with d = (max - min) / 15.
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < kQK; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    y[i].m = Fp32ToFp16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = std::clamp(static_cast<int>((x[j] - mn) * id + 0.5f), 0, 15);
      const int x1 = std::clamp(static_cast<int>((x[j + kQK / 2] - mn) * id + 0.5f), 0, 15);
      y[i].qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
}

// Per sub-block of 32: scale = (max - min) / 15, offset = -min >= 0; both
// re-quantized to 6 bits against the super-block d = max(scale)/63, dmin = max(offset)/63.
void QuantizeQ4_K(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float scale[8], offset[8];
    float max_scale = 0.0f, max_offset = 0.0f;
    for (int j = 0; j < 8; ++j) {
      float mn = 0.0f, mx = 0.0f;
      for (int l = 0; l < 32; ++l) {
        mn = std::min(mn, x[32 * j + l]);
        mx = std::max(mx, x[32 * j + l]);
      }
      scale[j] = (mx - mn) / 15.0f;
      offset[j] = -mn;
      max_scale = std::max(max_scale, scale[j]);
      max_offset = std::max(max_offset, offset[j]);
    }
    const float d = Fp16ToFp32(Fp32ToFp16(max_scale / 63.0f));
    const float dmin = Fp16ToFp32(Fp32ToFp16(max_offset / 63.0f));
    y[i].d = Fp32ToFp16(d);
    y[i].dmin = Fp32ToFp16(dmin);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(std::clamp(d > 0 ? (int)std::lround(scale[j] / d) : 0, 0, 63));
      m[j] = static_cast<uint8_t>(
          std::clamp(dmin > 0 ? (int)std::lround(offset[j] / dmin) : 0, 0, 63));
    }
    std::memset(y[i].scales, 0, 12);
    for (int j = 0; j < 8; ++j) {
      if (j < 4) {
        y[i].scales[j] |= sc[j];
        y[i].scales[j + 4] |= m[j];
      } else {
        y[i].scales[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
        y[i].scales[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
        y[i].scales[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
      }
    }
    // q = round((x + dmin*m) / (d*sc)) in 0..15; chunk c packs sub-blocks 2c (low) and 2c+1 (high).
    uint8_t q[kQKK];
    for (int j = 0; j < 8; ++j) {
      const float ds = d * sc[j];
      const float dm = dmin * m[j];
      for (int l = 0; l < 32; ++l) {
        const int v = ds > 0 ? (int)std::lround((x[32 * j + l] + dm) / ds) : 0;
        q[32 * j + l] = static_cast<uint8_t>(std::clamp(v, 0, 15));
      }
    }
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
      }
    }
  }
}

// Per group of 16: scale = signed max / -32; int8 group scales against d = max|scale|/127.
void QuantizeQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float scale[16];
    float max_abs_scale = 0.0f, max_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      float amax = 0.0f, max = 0.0f;
      for (int l = 0; l < 16; ++l) {
        if (std::fabs(x[16 * g + l]) > amax) {
          amax = std::fabs(x[16 * g + l]);
          max = x[16 * g + l];
        }
      }
      scale[g] = max / -32.0f;
      if (std::fabs(scale[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(scale[g]);
        max_scale = scale[g];
      }
    }
    const float d = Fp16ToFp32(Fp32ToFp16(max_scale / -127.0f));
    y[i].d = Fp32ToFp16(d);
    uint8_t q[kQKK];
    for (int g = 0; g < 16; ++g) {
      const int s = d != 0 ? std::clamp((int)std::lround(scale[g] / d), -127, 127) : 0;
      y[i].scales[g] = static_cast<int8_t>(s);
      const float ds = d * s;
      for (int l = 0; l < 16; ++l) {
        const int v = ds != 0 ? (int)std::lround(x[16 * g + l] / ds) : 0;
        q[16 * g + l] = static_cast<uint8_t>(std::clamp(v, -32, 31) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        y[i].ql[64 * h + l] = static_cast<uint8_t>((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
        y[i].ql[64 * h + l + 32] =
            static_cast<uint8_t>((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
        y[i].qh[32 * h + l] =
            static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                 ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

void QuantizeRowQ8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    QuantizeSym8Half(x + i * kQK, kQK, &y[i].d, y[i].qs);
  }
}

void QuantizeRowQ8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    QuantizeSym8Half(x + i * kQK, kQK, &y[i].d, y[i].qs);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += y[i].qs[j];
    y[i].sum = static_cast<int16_t>(sum);
  }
}

void QuantizeRowQ8_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    QuantizeSym8(x + i * kQKK, kQKK, &y[i].d, y[i].qs);
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

void QuantizeRowQ16_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ16_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i)
    QuantizeSplit16(x + i * kQK, kQK, &y[i].d, y[i].hi, y[i].lo);
}

void QuantizeRowQ16_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ16_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    y[i].sum = QuantizeSplit16(x + i * kQK, kQK, &y[i].d, y[i].hi, y[i].lo);
  }
}

void QuantizeRowQ16_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ16_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    QuantizeSplit16(x + i * kQKK, kQKK, &y[i].d, y[i].hi, y[i].lo);
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += Q16(y[i].hi, y[i].lo, 16 * g + l);
      y[i].bsums[g] = sum;
    }
  }
}

void QuantizeActivations(DType act_type, const float* x, void* dst, int64_t n) {
  switch (act_type) {
    case DType::kF32:
      std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kQ8_0:
      return QuantizeRowQ8_0(x, dst, n);
    case DType::kQ8_1:
      return QuantizeRowQ8_1(x, dst, n);
    case DType::kQ8_K:
      return QuantizeRowQ8_K(x, dst, n);
    case DType::kQ16_0:
      return QuantizeRowQ16_0(x, dst, n);
    case DType::kQ16_1:
      return QuantizeRowQ16_1(x, dst, n);
    case DType::kQ16_K:
      return QuantizeRowQ16_K(x, dst, n);
    default:
      assert(false && "QuantizeActivations: not an activation type");
  }
}

void QuantizeWeights(DType type, const float* x, void* dst, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToFp16(x[i]);
      return;
    }
    case DType::kBF16: {
      auto* b = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) b[i] = Fp32ToBf16(x[i]);
      return;
    }
    case DType::kQ4_0:
      return QuantizeQ4_0(x, static_cast<BlockQ4_0*>(dst), n);
    case DType::kQ4_1:
      return QuantizeQ4_1(x, static_cast<BlockQ4_1*>(dst), n);
    case DType::kQ8_0:
      return QuantizeRowQ8_0(x, dst, n);
    case DType::kQ4_K:
      return QuantizeQ4_K(x, static_cast<BlockQ4_K*>(dst), n);
    case DType::kQ6_K:
      return QuantizeQ6_K(x, static_cast<BlockQ6_K*>(dst), n);
    default:
      assert(false && "QuantizeWeights: unsupported type");
  }
}

}  // namespace braid::kernels::ref
