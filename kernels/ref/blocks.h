// Block layouts of the quantized types, byte for byte as ggml's ggml-common.h
// defines them (see docs/reference/llamacpp-gguf.md §1). Internal to kernels/.
#pragma once

#include <cstdint>

namespace braid::kernels {

inline constexpr int kQK = 32;    // elements per Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q8_1 block
inline constexpr int kQKK = 256;  // elements per K-quant super-block

// x = d * (q - 8), q in 0..15; element j in the low nibble of qs[j], j+16 in the high one.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// x = d * q + m, q in 0..15, same nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
// x = d * (q - 16), q in 0..31: the low 4 bits as in Q4_0 (element j in the low
// nibble of qs[j], j+16 in the high one), the 5th bit of element j is bit j of
// qh read as a little-endian uint32.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// x = d * q.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// x = d * q, with sum = sum(qs) kept exactly (the Q4_1 offset term needs
// sum(x) = d * sum). ggml stores d * sum rounded to fp16 instead; in
// m_w * sum(x) that rounding does not cancel against the main term (Q4_1's
// min m_w is about -8 d_w, so the two terms largely cancel) and it costs
// about 10x the accuracy of the whole dot product.
struct BlockQ8_1 {
  uint16_t d;
  int16_t sum;
  int8_t qs[kQK];
};
// 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], 6-bit sc/m packed in scales[12].
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
// 16 groups of 16: x = d * sc[g] * (q - 32), q 6 bits split into ql (4) and qh (2).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
// x = d * q; bsums[g] = sum of the 16 qs of group g.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

// ---- Split 16-bit activations (Braid-internal, never in a file) ----------------
// Per block: d = amax / 16256 (fp32), q16 = round(x / d) (nearest even), so
// |q16| <= 16256 = 127 * 128; stored split as
//   hi = floor((q16 + 64) / 128) in [-127, 127],  lo = q16 - 128 * hi in [-64, 63],
// so that w . q16 = 128 * (w . hi) + (w . lo), both int8 dot products.
inline constexpr int kQ16Max = 16256;

// x = d * (128 * hi + lo).  Partner of Q4_0 and Q8_0.
struct BlockQ16_0 {
  float d;
  int8_t hi[kQK];
  int8_t lo[kQK];
};
// As Q16_0 plus sum = sum of the 32 q16 (exact): the Q4_1 offset term is m_w * d * sum.
struct BlockQ16_1 {
  float d;
  int32_t sum;
  int8_t hi[kQK];
  int8_t lo[kQK];
};
// 256 elements; bsums[g] = sum of the 16 q16 of group g (Q4_K's mins, Q6_K's "-32").
struct BlockQ16_K {
  float d;
  int8_t hi[kQKK];
  int8_t lo[kQKK];
  int32_t bsums[kQKK / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ16_0) == 68);
static_assert(sizeof(BlockQ16_1) == 72);
static_assert(sizeof(BlockQ16_K) == 580);

// q16 = 128 * hi + lo of element j.
inline int Q16(const int8_t* hi, const int8_t* lo, int j) { return 128 * hi[j] + lo[j]; }

// The 6-bit scale and min of Q4_K sub-block j (0..7), as ggml's get_scale_min_k4.
inline void Q4KScaleMin(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace braid::kernels
