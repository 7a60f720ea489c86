// Scalar dot products of a weight row with a quantized activation row. Integer
// sums inside each block are exact; blocks are combined in fp32 as ggml does.
// The split 16-bit partners (Q16_*) are dotted with q16 = 128 hi + lo directly:
// the SIMD kernels' (w.hi << 7) + w.lo is the same integer.
#include <cassert>

#include "ref/blocks.h"
#include "ref/ref.h"

namespace braid::kernels::ref {
namespace {

// sum_b dw_b * dx_b * sum_j (q_bj - 8) * x_bj
float DotQ4_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((w[i].qs[j] & 0xF) - 8) * x[i].qs[j];
      sumi += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * Fp16ToFp32(w[i].d) * Fp16ToFp32(x[i].d);
  }
  return sum;
}

// sum_b [dw*dx * sum_j q_j x_j + m_w * s_x],  s_x = dx * sum_j x_j
float DotQ4_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (w[i].qs[j] & 0xF) * x[i].qs[j];
      sumi += (w[i].qs[j] >> 4) * x[i].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * Fp16ToFp32(w[i].d) * Fp16ToFp32(x[i].d) +
           Fp16ToFp32(w[i].m) * Fp16ToFp32(x[i].d) * static_cast<float>(x[i].sum);
  }
  return sum;
}

float DotQ8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += w[i].qs[j] * x[i].qs[j];
    sum += static_cast<float>(sumi) * Fp16ToFp32(w[i].d) * Fp16ToFp32(x[i].d);
  }
  return sum;
}

// sum_blocks dx * [d * sum_j sc_j * (q . x)_j - dmin * sum_j m_j * bsum_j]
float DotQ4_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sumi = 0, summ = 0;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc_lo, m_lo, sc_hi, m_hi;
      Q4KScaleMin(2 * c, w[i].scales, &sc_lo, &m_lo);
      Q4KScaleMin(2 * c + 1, w[i].scales, &sc_hi, &m_hi);
      const uint8_t* q = w[i].qs + 32 * c;
      const int8_t* a = x[i].qs + 64 * c;
      int lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (q[l] & 0xF) * a[l];
        hi += (q[l] >> 4) * a[l + 32];
      }
      sumi += sc_lo * lo + sc_hi * hi;
      summ += m_lo * (x[i].bsums[4 * c] + x[i].bsums[4 * c + 1]) +
              m_hi * (x[i].bsums[4 * c + 2] + x[i].bsums[4 * c + 3]);
    }
    sum += x[i].d * (Fp16ToFp32(w[i].d) * static_cast<float>(sumi) -
                     Fp16ToFp32(w[i].dmin) * static_cast<float>(summ));
  }
  return sum;
}

// sum_blocks dx * d * sum_g sc_g * sum_{l in g} (q_l - 32) x_l
float DotQ6_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int8_t q[kQKK];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[i].ql + 64 * h;
      const uint8_t* qh = w[i].qh + 32 * h;
      int8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        qq[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        qq[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        qq[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        qq[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += q[16 * g + l] * x[i].qs[16 * g + l];
      sumi += w[i].scales[g] * s;
    }
    sum += x[i].d * Fp16ToFp32(w[i].d) * static_cast<float>(sumi);
  }
  return sum;
}

// ---- split 16-bit activations -------------------------------------------------
// Block integer sums stay in int32 for 32-element blocks (|sum| <= 32 * 128 * 16256
// < 2^27) and use int64 for the K-quants (sc * q * q16 over 256 elements can pass 2^31).

// sum_b dw * dx * sum_j (q_j - 8) q16_j
float DotQ4_0x16(int64_t n, const BlockQ4_0* w, const BlockQ16_0* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((w[i].qs[j] & 0xF) - 8) * Q16(x[i].hi, x[i].lo, j);
      sumi += ((w[i].qs[j] >> 4) - 8) * Q16(x[i].hi, x[i].lo, j + kQK / 2);
    }
    sum += static_cast<float>(sumi) * Fp16ToFp32(w[i].d) * x[i].d;
  }
  return sum;
}

// sum_b [dw * dx * sum_j q_j q16_j + m_w * dx * sum_j q16_j]
float DotQ4_1x16(int64_t n, const BlockQ4_1* w, const BlockQ16_1* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (w[i].qs[j] & 0xF) * Q16(x[i].hi, x[i].lo, j);
      sumi += (w[i].qs[j] >> 4) * Q16(x[i].hi, x[i].lo, j + kQK / 2);
    }
    sum += static_cast<float>(sumi) * Fp16ToFp32(w[i].d) * x[i].d +
           Fp16ToFp32(w[i].m) * x[i].d * static_cast<float>(x[i].sum);
  }
  return sum;
}

float DotQ8_0x16(int64_t n, const BlockQ8_0* w, const BlockQ16_0* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += w[i].qs[j] * Q16(x[i].hi, x[i].lo, j);
    sum += static_cast<float>(sumi) * Fp16ToFp32(w[i].d) * x[i].d;
  }
  return sum;
}

// sum_blocks dx * [d * sum_j sc_j * (q . q16)_j - dmin * sum_j m_j * (bsum_2j + bsum_2j+1)]
float DotQ4_Kx16(int64_t n, const BlockQ4_K* w, const BlockQ16_K* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int64_t sumi = 0, summ = 0;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc_lo, m_lo, sc_hi, m_hi;
      Q4KScaleMin(2 * c, w[i].scales, &sc_lo, &m_lo);
      Q4KScaleMin(2 * c + 1, w[i].scales, &sc_hi, &m_hi);
      const uint8_t* q = w[i].qs + 32 * c;
      int64_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (q[l] & 0xF) * Q16(x[i].hi, x[i].lo, 64 * c + l);
        hi += (q[l] >> 4) * Q16(x[i].hi, x[i].lo, 64 * c + 32 + l);
      }
      sumi += sc_lo * lo + sc_hi * hi;
      summ += m_lo * int64_t{x[i].bsums[4 * c] + x[i].bsums[4 * c + 1]} +
              m_hi * int64_t{x[i].bsums[4 * c + 2] + x[i].bsums[4 * c + 3]};
    }
    sum += x[i].d * (Fp16ToFp32(w[i].d) * static_cast<float>(sumi) -
                     Fp16ToFp32(w[i].dmin) * static_cast<float>(summ));
  }
  return sum;
}

// sum_blocks dx * d * sum_g sc_g * sum_{l in g} (q_l - 32) q16_l
float DotQ6_Kx16(int64_t n, const BlockQ6_K* w, const BlockQ16_K* x) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int8_t q[kQKK];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[i].ql + 64 * h;
      const uint8_t* qh = w[i].qh + 32 * h;
      int8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        qq[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        qq[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        qq[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        qq[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int64_t sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;  // |s| <= 16 * 32 * 16256 < 2^23
      for (int l = 0; l < 16; ++l) s += q[16 * g + l] * Q16(x[i].hi, x[i].lo, 16 * g + l);
      sumi += int64_t{w[i].scales[g]} * s;
    }
    sum += x[i].d * Fp16ToFp32(w[i].d) * static_cast<float>(sumi);
  }
  return sum;
}

float DotSplit16(DType weight_type, int64_t n, const void* w_row, const void* x) {
  switch (weight_type) {
    case DType::kQ4_0:
      return DotQ4_0x16(n, static_cast<const BlockQ4_0*>(w_row), static_cast<const BlockQ16_0*>(x));
    case DType::kQ4_1:
      return DotQ4_1x16(n, static_cast<const BlockQ4_1*>(w_row), static_cast<const BlockQ16_1*>(x));
    case DType::kQ8_0:
      return DotQ8_0x16(n, static_cast<const BlockQ8_0*>(w_row), static_cast<const BlockQ16_0*>(x));
    case DType::kQ4_K:
      return DotQ4_Kx16(n, static_cast<const BlockQ4_K*>(w_row), static_cast<const BlockQ16_K*>(x));
    case DType::kQ6_K:
      return DotQ6_Kx16(n, static_cast<const BlockQ6_K*>(w_row), static_cast<const BlockQ16_K*>(x));
    default:
      assert(false && "VecDot: no split 16-bit kernel for this weight type");
      return 0.0f;
  }
}

}  // namespace

float VecDot(DType weight_type, DType act_type, int64_t n, const void* w_row, const void* x) {
  if (act_type == DType::kQ16_0 || act_type == DType::kQ16_1 || act_type == DType::kQ16_K) {
    return DotSplit16(weight_type, n, w_row, x);
  }
  switch (weight_type) {
    case DType::kF32:
      return DotF32(static_cast<const float*>(w_row), static_cast<const float*>(x), n);
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(w_row);
      const auto* a = static_cast<const float*>(x);
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i) sum += Fp16ToFp32(h[i]) * a[i];
      return sum;
    }
    case DType::kBF16: {
      const auto* b = static_cast<const uint16_t*>(w_row);
      const auto* a = static_cast<const float*>(x);
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i) sum += Bf16ToFp32(b[i]) * a[i];
      return sum;
    }
    case DType::kQ4_0:
      return DotQ4_0(n, static_cast<const BlockQ4_0*>(w_row), static_cast<const BlockQ8_0*>(x));
    case DType::kQ4_1:
      return DotQ4_1(n, static_cast<const BlockQ4_1*>(w_row), static_cast<const BlockQ8_1*>(x));
    case DType::kQ8_0:
      return DotQ8_0(n, static_cast<const BlockQ8_0*>(w_row), static_cast<const BlockQ8_0*>(x));
    case DType::kQ4_K:
      return DotQ4_K(n, static_cast<const BlockQ4_K*>(w_row), static_cast<const BlockQ8_K*>(x));
    case DType::kQ6_K:
      return DotQ6_K(n, static_cast<const BlockQ6_K*>(w_row), static_cast<const BlockQ8_K*>(x));
    default:
      assert(false && "VecDot: unsupported weight type");
      return 0.0f;
  }
}

}  // namespace braid::kernels::ref
