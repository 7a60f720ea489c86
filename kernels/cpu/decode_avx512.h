// The 512-bit decode kernels for Q4_1 and Q8_0 weights, written once over the
// activation precision (AVX-512 BW + VNNI). Internal: included only by
// decode16_avx512.cpp (split 16-bit activations) and decode8_avx512.cpp (int8),
// which are compiled with the AVX-512 flags and reached only through dispatch.
// Each supplies, per weight type, a policy `A` for its workspace layout:
//   Q4_1: A::kGroupBytes  activation bytes of one group of four blocks;
//         A::Dot(NibblesQ4_1 q, const uint8_t* x) -> 16 x int32, block k of the
//         group in lanes 4k..4k+3: the exact sum of q_k * x_k;
//   Q8_0: A::kPairBytes   activation bytes of one pair of blocks;
//         A::Dot(u, init, x) -> 16 x int32, blocks i (lanes 0..7) and i+1
//         (8..15): the exact sum of w * x, where u = w + 128 and init holds the
//         precision's correction for the +128 in lanes 0 and 8;
//   both: A::kMultiTokens  tokens per pass of rows_multi.
// Everything else (weight loads, unpacking, scales, accumulation, reductions)
// is common, so both precisions share the fp32 operations described below.
//
// For one token (`rows`, decode) and for several (`rows_multi`) the kernels are
// templates over T tokens whose weight quants are unpacked once per step and
// dotted with each token's prepared row, with per-token accumulators; T = 1 is
// the decode kernel, so every (row, token) gets the same fp32 operations in both.
//
// Weight bytes are gathered into a zmm with one two-source word permute
// (vpermt2w) over plain loads of the row, so a whole group of blocks costs two
// loads and no per-block inserts. Each group's exact int32 dot products are
// converted once (vcvtdq2ps) and meet the blocks' scales in one FMA.
// A last, partial group is read with masked loads (zero bytes for the missing
// blocks, whose scales the prepared workspace pads with zeros), so no load ever
// touches memory past the row. The weight stream is prefetched
// kDecodePrefetchBytes ahead (kernel_table.h).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/kernel_table.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu::decode512 {

inline __m512i Load512(const void* p) { return _mm512_loadu_si512(p); }

// Calls f.template operator()<n>() for 1 <= n <= kMax (nothing for n = 0): the
// leftover tokens of rows_multi.
template <int kMax, class F>
inline void WithTokens(int n, F&& f) {
  if constexpr (kMax >= 1) {
    if (n == kMax) {
      f.template operator()<kMax>();
    } else {
      WithTokens<kMax - 1>(n, f);
    }
  }
}

// ---- Q4_1: four blocks (128 elements, 80 weight bytes) per step ------------------
// ws: groups of four blocks (padded with zero blocks to an even number of
// groups), A::kGroupBytes each, block k's activations in 128-bit lane k of each
// 64-byte plane: [0, 16) of every block (which meets the low nibbles) in one
// plane, [16, 32) (the high nibbles) in the next; then, when n/32 = 2 mod 4,
// one "pair tail" group: the last two blocks twice, [b, b', b, b'] in the four
// lanes (the last two blocks of two rows in one step); then scales: 8 floats
// per group, [dx_k, sx_k = dx_k * sum_k] for k = 0..3, and 8 for the pair tail.
struct Q4_1Layout {
  int64_t nb, nfull, rem, ng;
  bool pair_tail;
  size_t scales_off;  // byte offset of the scales in a token's workspace
  const float* scales(const uint8_t* ws) const {
    return reinterpret_cast<const float*>(ws + scales_off);
  }
  float* scales(uint8_t* ws) const { return reinterpret_cast<float*>(ws + scales_off); }
  Q4_1Layout(int64_t n, size_t group_bytes)
      : nb(n / kQK),
        nfull(nb / 4),
        rem(nb % 4),
        ng((nb + 7) / 8 * 2),
        pair_tail(rem == 2),
        scales_off(group_bytes * static_cast<size_t>(ng + (pair_tail ? 1 : 0))) {}
};

// Word indices into the 80 bytes of four Q4_1 blocks (words 0..31: the first 64
// bytes, 32..39: the next 16). Block k is words 10k (d), 10k+1 (m), 10k+2..10k+9 (qs).
alignas(64) inline constexpr uint16_t kQ4_1Quants[32] = {2,  3,  4,  5,  6,  7,  8,  9,  12, 13, 14,
                                                         15, 16, 17, 18, 19, 22, 23, 24, 25, 26, 27,
                                                         28, 29, 32, 33, 34, 35, 36, 37, 38, 39};
// d and m of the four blocks of group g (first 64 bytes, words 0..31) and of group
// g+1 (its first 64 bytes as the second source, words 32..63).
alignas(64) inline constexpr uint16_t kQ4_1Scales[32] = {0,  1,  10, 11, 20, 21, 30, 31,
                                                         32, 33, 42, 43, 52, 53, 62, 63};
// The pair tail: the last two blocks (40 bytes) of row r (words 0..19) and of row
// r+1 (second source, words 32..51).
alignas(64) inline constexpr uint16_t kQ4_1PairQuants[32] = {
    2,  3,  4,  5,  6,  7,  8,  9,  12, 13, 14, 15, 16, 17, 18, 19,
    34, 35, 36, 37, 38, 39, 40, 41, 44, 45, 46, 47, 48, 49, 50, 51};
alignas(64) inline constexpr uint16_t kQ4_1PairScales[32] = {0, 1, 10, 11, 32, 33, 42, 43};

// The weight quants of a group as unsigned nibbles: lo (bytes [0, 16) of each
// block) and hi (bytes [16, 32)), block k in 128-bit lane k.
struct NibblesQ4_1 {
  __m512i lo, hi;
};
inline NibblesQ4_1 UnpackQ4_1(__m512i a, __m512i c, __m512i qidx) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i q = _mm512_permutex2var_epi16(a, qidx, c);
  return {_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_srli_epi16(q, 4), m4)};
}

// d_k dx_k of block k (lane 2k of the scale products) -> int32 lanes 4k..4k+3.
inline __m512i Pick(int first) {
  return _mm512_add_epi32(_mm512_set1_epi32(first),
                          _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6));
}

inline __m512i Tail16(const uint8_t* b) {
  return _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
}

// One row against T tokens (token t's workspace at ws + t * wss), unreduced:
// out[t] = lanes of sum_b dw_b dx_b (q_b . x_b) + m_b sx_b over the whole
// groups, plus the partial group unless skip_rem. Steps of two groups (eight
// blocks) share the scale work: one permute gathers the eight (d, m) pairs, one
// vcvtph2ps, then per token one multiply by [dx, sx] gives d dx and m sx.
// The weight quants are unpacked once per step and meet every token; the float
// operations of each token are those of T = 1 (batch invariance), since every
// lane of every token's accumulators sees the same sequence of fp32 operations.
template <class A, int T>
inline void RowQ4_1(const Q4_1Layout& l, const uint8_t* w, const uint8_t* ws, size_t wss,
                    bool skip_rem, __m512* out) {
  const __m512i qidx = Load512(kQ4_1Quants);
  const __m512i didx = Load512(kQ4_1Scales);
  const __m512i pick0 = Pick(0), pick1 = Pick(8);
  const size_t soff = l.scales_off;
  __m512 acc0[T], acc1[T], summ[T];  // summ: odd lanes m sx
  for (int t = 0; t < T; ++t) {
    acc0[t] = _mm512_setzero_ps();
    acc1[t] = _mm512_setzero_ps();
    summ[t] = _mm512_setzero_ps();
  }
  // Groups g and (if two) g+1, from a0/c0 and a1/c1 (the 64 + 16 bytes of each).
  auto step = [&](int64_t g, __m512i a0, __m512i c0, __m512i a1, __m512i c1, bool two) {
    const __m256i dm = _mm512_castsi512_si256(_mm512_permutex2var_epi16(a0, didx, a1));
    const __m512 dmf = _mm512_cvtph_ps(dm);
    const NibblesQ4_1 q0 = UnpackQ4_1(a0, c0, qidx);
    const NibblesQ4_1 q1 = two ? UnpackQ4_1(a1, c1, qidx) : q0;
    for (int t = 0; t < T; ++t) {
      const uint8_t* x = ws + t * wss;
      const __m512 prod = _mm512_mul_ps(dmf, _mm512_loadu_ps(x + soff + 32 * g));
      summ[t] = _mm512_mask_add_ps(summ[t], 0xAAAA, summ[t], prod);
      const __m512i p0 = A::Dot(q0, x + A::kGroupBytes * g);
      acc0[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(pick0, prod), acc0[t]);
      if (two) {
        const __m512i p1 = A::Dot(q1, x + A::kGroupBytes * (g + 1));
        acc1[t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(pick1, prod), acc1[t]);
      }
    }
  };
  const __m512i zero = _mm512_setzero_si512();
  const int64_t rem = skip_rem ? 0 : l.rem;
  const __mmask64 krem = (uint64_t{1} << (20 * rem)) - 1;  // 20, 40 or 60 bytes (or none)
  int64_t g = 0;
  for (; g + 1 < l.nfull; g += 2) {
    const uint8_t* b = w + 80 * g;
    step(g, Load512(b), Tail16(b + 64), Load512(b + 80), Tail16(b + 144), true);
  }
  if (g < l.nfull) {
    const uint8_t* b = w + 80 * g;
    step(g, Load512(b), Tail16(b + 64), _mm512_maskz_loadu_epi8(krem, b + 80), zero, rem > 0);
  } else if (rem > 0) {
    step(g, _mm512_maskz_loadu_epi8(krem, w + 80 * g), zero, zero, zero, false);
  }
  // (The even lanes of summ are zero.)
  for (int t = 0; t < T; ++t) out[t] = _mm512_add_ps(_mm512_add_ps(acc0[t], acc1[t]), summ[t]);
}

// The pair tail of rows r (w0) and r+1 (w1) against T tokens: their last two
// blocks in one step. Lanes 0..7 belong to row r, 8..15 to row r+1 (m sx terms
// in lanes 0, 1 and 8, 9); each half depends on its own row only, so a row
// without a partner (w1 = w0) gets bit for bit the lanes it gets in a pair.
template <class A, int T>
inline void PairTailQ4_1(const Q4_1Layout& l, const uint8_t* w0, const uint8_t* w1,
                         const uint8_t* ws, size_t wss, __m512* out) {
  const __mmask64 k40 = (uint64_t{1} << 40) - 1;
  const __m512i a = _mm512_maskz_loadu_epi8(k40, w0 + 80 * l.nfull);
  const __m512i b = _mm512_maskz_loadu_epi8(k40, w1 + 80 * l.nfull);
  const __m128i dm =
      _mm512_castsi512_si128(_mm512_permutex2var_epi16(a, Load512(kQ4_1PairScales), b));
  const __m256 dmf = _mm256_cvtph_ps(dm);
  const NibblesQ4_1 q = UnpackQ4_1(a, b, Load512(kQ4_1PairQuants));
  const __m512i midx = _mm512_setr_epi32(1, 3, 0, 0, 0, 0, 0, 0, 5, 7, 0, 0, 0, 0, 0, 0);
  const __m512i pick = Pick(0);
  for (int t = 0; t < T; ++t) {
    const uint8_t* x = ws + t * wss;
    const __m256 prod = _mm256_mul_ps(dmf, _mm256_loadu_ps(l.scales(x) + 8 * l.ng));
    const __m512 pr = _mm512_zextps256_ps512(prod);
    const __m512i p = A::Dot(q, x + A::kGroupBytes * l.ng);
    const __m512 m = _mm512_maskz_permutexvar_ps(0x0303, midx, pr);
    out[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(pick, pr), m);
  }
}

// Rows r (w0) and, unless w1 is null, r+1 (w1) against T tokens:
// y[t * ldy] (row r) and y[t * ldy + 1] (row r+1).
template <class A, int T>
inline void PairQ4_1(const Q4_1Layout& l, const uint8_t* w0, const uint8_t* w1, const uint8_t* ws,
                     size_t wss, float* y, int64_t ldy) {
  __m512 a[T];
  if (!l.pair_tail) {
    RowQ4_1<A, T>(l, w0, ws, wss, false, a);
    for (int t = 0; t < T; ++t) y[t * ldy] = _mm512_reduce_add_ps(a[t]);
    if (w1 != nullptr) {
      RowQ4_1<A, T>(l, w1, ws, wss, false, a);
      for (int t = 0; t < T; ++t) y[t * ldy + 1] = _mm512_reduce_add_ps(a[t]);
    }
    return;
  }
  __m512 tail[T];
  PairTailQ4_1<A, T>(l, w0, w1 != nullptr ? w1 : w0, ws, wss, tail);
  // Row r: a + tail[0..8); row r+1: a + tail[8..16).
  RowQ4_1<A, T>(l, w0, ws, wss, true, a);
  for (int t = 0; t < T; ++t)
    y[t * ldy] = _mm512_reduce_add_ps(_mm512_mask_add_ps(a[t], 0x00FF, a[t], tail[t]));
  if (w1 != nullptr) {
    RowQ4_1<A, T>(l, w1, ws, wss, true, a);
    for (int t = 0; t < T; ++t)
      y[t * ldy + 1] = _mm512_reduce_add_ps(
          _mm512_mask_add_ps(a[t], 0x00FF, a[t], _mm512_shuffle_f32x4(tail[t], tail[t], 0x4E)));
  }
}

// DecodeKernel::rows: the rows in pairs (for the pair tail), one token.
template <class A>
void RowsQ4_1(int64_t n, const uint8_t* w, size_t row_bytes, int64_t nrows, const uint8_t* ws,
              float* y) {
  const Q4_1Layout l(n, A::kGroupBytes);
  for (int64_t r = 0; r < nrows; r += 2) {
    const uint8_t* w0 = w + r * row_bytes;
    const bool two = r + 1 < nrows;
    PrefetchAhead(w0, (two ? 2 : 1) * row_bytes);
    PairQ4_1<A, 1>(l, w0, two ? w0 + row_bytes : nullptr, ws, 0, y + r, 0);
  }
}

// DecodeKernel::rows_multi: each pair of rows meets the tokens A::kMultiTokens
// at a time (weights unpacked once per group for all of them), then the rest.
template <class A>
void RowsMultiQ4_1(int64_t n, const uint8_t* w, size_t row_bytes, int64_t nrows, const uint8_t* ws,
                   size_t wss, int ntok, float* y, int64_t ldy) {
  constexpr int K = A::kMultiTokens;
  const Q4_1Layout l(n, A::kGroupBytes);
  for (int64_t r = 0; r < nrows; r += 2) {
    const uint8_t* w0 = w + r * row_bytes;
    const uint8_t* w1 = r + 1 < nrows ? w0 + row_bytes : nullptr;
    PrefetchAhead(w0, (w1 != nullptr ? 2 : 1) * row_bytes);
    int t = 0;
    for (; t + K <= ntok; t += K)
      PairQ4_1<A, K>(l, w0, w1, ws + t * wss, wss, y + t * ldy + r, ldy);
    WithTokens<K - 1>(ntok - t, [&]<int U>() {
      PairQ4_1<A, U>(l, w0, w1, ws + t * wss, wss, y + t * ldy + r, ldy);
    });
  }
}

// ---- Q8_0: two blocks (64 elements, 68 weight bytes) per step --------------------
// The weights w in [-128, 127] enter vpdpbusd as the unsigned bytes u = w + 128
// (w xor 0x80); sum u x = sum w x + 128 sum x, which the accumulator's initial
// value (a prepared int32 per block, in one lane of each block) cancels.
// ws: pairs of blocks (padded with zero blocks to an even number of pairs),
// A::kPairBytes each; then that int32 per block; then scales: dx per block (float).
struct Q8_0Layout {
  int64_t nb, np;
  size_t sums_off, scales_off;  // byte offsets in a token's workspace
  Q8_0Layout(int64_t n, size_t pair_bytes)
      : nb(n / kQK),
        np((n / kQK + 3) / 4 * 2),  // steps take two pairs
        sums_off(pair_bytes * static_cast<size_t>(np)),
        scales_off(sums_off + 8 * static_cast<size_t>(np)) {}
};

// Word indices into the 68 bytes of two Q8_0 blocks (words 0..31: the first 64
// bytes, 32..33: the next 4). Block k is words 17k (d) and 17k+1..17k+16 (qs).
alignas(64) inline constexpr uint16_t kQ8_0Quants[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                                         12, 13, 14, 15, 16, 18, 19, 20, 21, 22, 23,
                                                         24, 25, 26, 27, 28, 29, 30, 31, 32, 33};
// d of the two blocks of pair i (first source) and of pair i+2 (second source).
alignas(64) inline constexpr uint16_t kQ8_0Scales[32] = {0, 17, 32, 49};

// u = w + 128 of two blocks (block i in bytes [0, 32), i+1 in [32, 64)) from the
// 64 + 4 bytes a, c.
inline __m512i UnpackQ8_0(__m512i a, __m512i c, __m512i qidx) {
  return _mm512_xor_si512(_mm512_permutex2var_epi16(a, qidx, c),
                          _mm512_set1_epi8(static_cast<char>(0x80)));
}

// One row against T tokens (token t's workspace at ws + t * wss):
// y[t * ldy] = sum_b dw_b dx_b (w_b . x_b), four blocks per step (two pairs
// sharing one permute and one vcvtph2ps for their scales; per token one
// multiply by dx). Every token sees the fp32 operations of T = 1.
template <class A, int T>
inline void RowQ8_0(const Q8_0Layout& l, const uint8_t* w, const uint8_t* ws, size_t wss, float* y,
                    int64_t ldy) {
  const __m512i qidx = Load512(kQ8_0Quants);
  const __m512i didx = Load512(kQ8_0Scales);
  // Element 2k (pair i) or 2k+1 (pair i+2) of a 4-vector -> lanes 0..7 and 8..15.
  const __m512i lanes0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i lanes1 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  __m512 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) {
    acc0[t] = _mm512_setzero_ps();
    acc1[t] = _mm512_setzero_ps();
  }
  // Blocks i..i+3 (i even: pairs i/2 and i/2 + 1) from (a0, c0) and (a1, c1);
  // `two`: whether blocks i+2, i+3 are taken.
  auto step = [&](int64_t i, __m512i a0, __m512i c0, __m512i a1, __m512i c1, bool two) {
    const __m128i d16 = _mm512_castsi512_si128(_mm512_permutex2var_epi16(a0, didx, a1));
    const __m128 f = _mm_cvtph_ps(d16);
    const __m512i u0 = UnpackQ8_0(a0, c0, qidx);
    const __m512i u1 = two ? UnpackQ8_0(a1, c1, qidx) : u0;
    for (int t = 0; t < T; ++t) {
      const uint8_t* x = ws + t * wss;
      const auto* xs = reinterpret_cast<const float*>(x + l.scales_off);
      const auto* sums = reinterpret_cast<const int32_t*>(x + l.sums_off);
      const __m512 prod = _mm512_zextps128_ps512(_mm_mul_ps(f, _mm_loadu_ps(xs + i)));
      const __m512i s =
          _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sums + i)));
      const uint8_t* xq = x + A::kPairBytes / 2 * i;
      const __m512i p0 = A::Dot(u0, _mm512_maskz_permutexvar_epi32(0x0101, lanes0, s), xq);
      acc0[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(lanes0, prod), acc0[t]);
      if (two) {
        const __m512i p1 =
            A::Dot(u1, _mm512_maskz_permutexvar_epi32(0x0101, lanes1, s), xq + A::kPairBytes);
        acc1[t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(lanes1, prod), acc1[t]);
      }
    }
  };
  auto tail4 = [](const uint8_t* b) {
    int32_t t;
    std::memcpy(&t, b, 4);
    return _mm512_zextsi128_si512(_mm_cvtsi32_si128(t));
  };
  const __m512i zero = _mm512_setzero_si512();
  const int64_t nb = l.nb;
  int64_t i = 0;
  for (; i + 3 < nb; i += 4) {
    const uint8_t* b = w + 34 * i;
    step(i, Load512(b), tail4(b + 64), Load512(b + 68), tail4(b + 132), true);
  }
  // 1..3 blocks left: whole pairs from plain loads, a lone block masked (34 bytes).
  const int64_t left = nb - i;
  const uint8_t* b = w + 34 * i;
  const __mmask64 k34 = (uint64_t{1} << 34) - 1;
  if (left == 3) {
    step(i, Load512(b), tail4(b + 64), _mm512_maskz_loadu_epi8(k34, b + 68), zero, true);
  } else if (left == 2) {
    step(i, Load512(b), tail4(b + 64), zero, zero, false);
  } else if (left == 1) {
    step(i, _mm512_maskz_loadu_epi8(k34, b), zero, zero, zero, false);
  }
  for (int t = 0; t < T; ++t) y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
}

// DecodeKernel::rows: one token.
template <class A>
void RowsQ8_0(int64_t n, const uint8_t* w, size_t row_bytes, int64_t nrows, const uint8_t* ws,
              float* y) {
  const Q8_0Layout l(n, A::kPairBytes);
  for (int64_t r = 0; r < nrows; ++r) {
    PrefetchAhead(w + r * row_bytes, row_bytes);
    RowQ8_0<A, 1>(l, w + r * row_bytes, ws, 0, y + r, 0);
  }
}

// DecodeKernel::rows_multi: each row meets the tokens A::kMultiTokens at a time
// (weights unpacked once per step for all of them), then the rest.
template <class A>
void RowsMultiQ8_0(int64_t n, const uint8_t* w, size_t row_bytes, int64_t nrows, const uint8_t* ws,
                   size_t wss, int ntok, float* y, int64_t ldy) {
  constexpr int K = A::kMultiTokens;
  const Q8_0Layout l(n, A::kPairBytes);
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* wr = w + r * row_bytes;
    PrefetchAhead(wr, row_bytes);
    int t = 0;
    for (; t + K <= ntok; t += K) RowQ8_0<A, K>(l, wr, ws + t * wss, wss, y + t * ldy + r, ldy);
    WithTokens<K - 1>(
        ntok - t, [&]<int U>() { RowQ8_0<A, U>(l, wr, ws + t * wss, wss, y + t * ldy + r, ldy); });
  }
}

}  // namespace braid::kernels::cpu::decode512
