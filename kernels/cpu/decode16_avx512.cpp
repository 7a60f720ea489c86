// 512-bit single-token kernels for split 16-bit activations (AVX-512 BW + VNNI;
// compiled with the AVX-512 flags, reached only through dispatch). They replace
// the 256-bit ones of decode_simd.inc for Q4_1 x Q16_1 and Q8_0 x Q16_0.
//
// Weight bytes are gathered into a zmm with one two-source word permute
// (vpermt2w) over plain loads of the row, so a whole group of blocks costs two
// loads and no per-block inserts. For each group, with q the weight quants as
// unsigned bytes u and q16 = 128 hi + lo the activations,
//   p = dpbusd(dpbusd(init, u, hi) << 7, u, lo) = sum u * q16 + 128 init
// exactly in int32, then one vcvtdq2ps and one FMA with the blocks' scales.
// A last, partial group is read with masked loads (zero bytes for the missing
// blocks, whose scales the prepared workspace pads with zeros), so no load ever
// touches memory past the row. The weight stream is prefetched
// kDecodePrefetchBytes ahead (kernel_table.h).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers build their "undefined" vectors as `__m512i __Y = __Y;`,
// which -Wuninitialized reports once inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "cpu/kernel_table.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu {
namespace {

inline __m512i Load512(const void* p) { return _mm512_loadu_si512(p); }

// ---- Q4_1 x Q16_1: four blocks (128 elements, 80 weight bytes) per step ---------
// ws: groups of four blocks (padded with zero blocks to an even number of groups),
// 256 bytes each:
//   [0, 64):    hi_{4g+k}[0, 16) in 128-bit lane k      (meets the low nibbles)
//   [64, 128):  hi_{4g+k}[16, 32) in lane k             (meets the high nibbles)
//   [128, 256): the same for lo
// then, when n/32 = 2 mod 4, one "pair tail" group: the last two blocks twice,
// [b, b', b, b'] in the four lanes (the last two blocks of two rows in one step);
// then scales: 8 floats per group, [dx_k, sx_k = dx_k * sum_k] for k = 0..3, and
// 8 for the pair tail.
struct Q4_1Layout {
  int64_t nb, nfull, rem, ng;
  bool pair_tail;
  const float* scales(const uint8_t* ws) const {
    return reinterpret_cast<const float*>(ws + 256 * (ng + (pair_tail ? 1 : 0)));
  }
  explicit Q4_1Layout(int64_t n)
      : nb(n / kQK), nfull(nb / 4), rem(nb % 4), ng((nb + 7) / 8 * 2), pair_tail(rem == 2) {}
};

void PrepareQ16_1x4(int64_t n, const void* xq, uint8_t* ws) {
  const auto* x = static_cast<const BlockQ16_1*>(xq);
  const Q4_1Layout l(n);
  auto* scales = const_cast<float*>(l.scales(ws));
  // Block i (or zeros for i < 0 or i >= nb) into lane k of the group at p, scales at s.
  auto put = [&](uint8_t* p, float* s, int k, int64_t i) {
    if (i >= 0 && i < l.nb) {
      std::memcpy(p + 16 * k, x[i].hi, 16);
      std::memcpy(p + 64 + 16 * k, x[i].hi + 16, 16);
      std::memcpy(p + 128 + 16 * k, x[i].lo, 16);
      std::memcpy(p + 192 + 16 * k, x[i].lo + 16, 16);
      s[2 * k] = x[i].d;
      s[2 * k + 1] = x[i].d * static_cast<float>(x[i].sum);
    } else {
      for (int o = 0; o < 256; o += 64) std::memset(p + o + 16 * k, 0, 16);
      s[2 * k] = 0.0f;
      s[2 * k + 1] = 0.0f;
    }
  };
  for (int64_t g = 0; g < l.ng; ++g) {
    for (int k = 0; k < 4; ++k) put(ws + 256 * g, scales + 8 * g, k, 4 * g + k);
  }
  if (l.pair_tail) {
    for (int k = 0; k < 4; ++k) put(ws + 256 * l.ng, scales + 8 * l.ng, k, l.nb - 2 + k % 2);
  }
}

// Word indices into the 80 bytes of four Q4_1 blocks (words 0..31: the first 64
// bytes, 32..39: the next 16). Block k is words 10k (d), 10k+1 (m), 10k+2..10k+9 (qs).
alignas(64) constexpr uint16_t kQ4_1Quants[32] = {
    2,  3,  4,  5,  6,  7,  8,  9,  12, 13, 14, 15, 16, 17, 18, 19,
    22, 23, 24, 25, 26, 27, 28, 29, 32, 33, 34, 35, 36, 37, 38, 39};
// d and m of the four blocks of group g (first 64 bytes, words 0..31) and of group
// g+1 (its first 64 bytes as the second source, words 32..63).
alignas(64) constexpr uint16_t kQ4_1Scales[32] = {0,  1,  10, 11, 20, 21, 30, 31,
                                                  32, 33, 42, 43, 52, 53, 62, 63};
// The pair tail: the last two blocks (40 bytes) of row r (words 0..19) and of row
// r+1 (second source, words 32..51).
alignas(64) constexpr uint16_t kQ4_1PairQuants[32] = {
    2,  3,  4,  5,  6,  7,  8,  9,  12, 13, 14, 15, 16, 17, 18, 19,
    34, 35, 36, 37, 38, 39, 40, 41, 44, 45, 46, 47, 48, 49, 50, 51};
alignas(64) constexpr uint16_t kQ4_1PairScales[32] = {0, 1, 10, 11, 32, 33, 42, 43};

// 16 x int32: sum of u * q16 over four blocks (block k in lanes 4k..4k+3): the low
// nibbles meet activations [0, 16) of each block, the high nibbles [16, 32).
inline __m512i GroupDotQ4_1(__m512i a, __m512i c, __m512i qidx, const uint8_t* x) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i q = _mm512_permutex2var_epi16(a, qidx, c);
  const __m512i lo = _mm512_and_si512(q, m4);
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
  __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, Load512(x));
  p = _mm512_slli_epi32(_mm512_dpbusd_epi32(p, hi, Load512(x + 64)), 7);
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(p, lo, Load512(x + 128)), hi, Load512(x + 192));
}

// d_k dx_k of block k (lane 2k of the scale products) -> int32 lanes 4k..4k+3.
inline __m512i Pick(int first) {
  return _mm512_add_epi32(_mm512_set1_epi32(first),
                          _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6));
}

inline __m512i Tail16(const uint8_t* b) {
  return _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
}

// One row, unreduced: lanes of sum_b dw_b dx_b (q_b . q16_b) + m_b sx_b over the
// whole groups, plus the partial group unless skip_rem. Steps of two groups
// (eight blocks) share the scale work: one permute gathers the eight (d, m)
// pairs, one vcvtph2ps and one multiply by [dx, sx] give d dx and m sx.
inline __m512 RowQ4_1x16(const Q4_1Layout& l, const uint8_t* w, const uint8_t* xp, const float* xs,
                         bool skip_rem) {
  const __m512i qidx = Load512(kQ4_1Quants);
  const __m512i didx = Load512(kQ4_1Scales);
  const __m512i pick0 = Pick(0), pick1 = Pick(8);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 summ = _mm512_setzero_ps();  // odd lanes: m sx
  // Groups g and (if two) g+1, from a0/c0 and a1/c1 (the 64 + 16 bytes of each).
  auto step = [&](int64_t g, __m512i a0, __m512i c0, __m512i a1, __m512i c1, bool two) {
    const __m256i dm = _mm512_castsi512_si256(_mm512_permutex2var_epi16(a0, didx, a1));
    const __m512 prod = _mm512_mul_ps(_mm512_cvtph_ps(dm), _mm512_loadu_ps(xs + 8 * g));
    summ = _mm512_mask_add_ps(summ, 0xAAAA, summ, prod);
    const __m512i p0 = GroupDotQ4_1(a0, c0, qidx, xp + 256 * g);
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(pick0, prod), acc0);
    if (two) {
      const __m512i p1 = GroupDotQ4_1(a1, c1, qidx, xp + 256 * (g + 1));
      acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(pick1, prod), acc1);
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
  return _mm512_add_ps(_mm512_add_ps(acc0, acc1), summ);  // the even lanes of summ are zero
}

// The pair tail of rows r (w0) and r+1 (w1): their last two blocks in one step.
// Lanes 0..7 belong to row r, 8..15 to row r+1 (m sx terms in lanes 0, 1 and 8, 9).
inline __m512 PairTailQ4_1x16(const Q4_1Layout& l, const uint8_t* w0, const uint8_t* w1,
                              const uint8_t* xp, const float* xs) {
  const __mmask64 k40 = (uint64_t{1} << 40) - 1;
  const __m512i a = _mm512_maskz_loadu_epi8(k40, w0 + 80 * l.nfull);
  const __m512i b = _mm512_maskz_loadu_epi8(k40, w1 + 80 * l.nfull);
  const __m128i dm = _mm512_castsi512_si128(_mm512_permutex2var_epi16(a, Load512(kQ4_1PairScales), b));
  const __m256 prod = _mm256_mul_ps(_mm256_cvtph_ps(dm), _mm256_loadu_ps(xs + 8 * l.ng));
  const __m512 pr = _mm512_zextps256_ps512(prod);
  const __m512i p = GroupDotQ4_1(a, b, Load512(kQ4_1PairQuants), xp + 256 * l.ng);
  const __m512 m = _mm512_maskz_permutexvar_ps(
      0x0303, _mm512_setr_epi32(1, 3, 0, 0, 0, 0, 0, 0, 5, 7, 0, 0, 0, 0, 0, 0), pr);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(Pick(0), pr), m);
}

void RowsQ4_1x16(int64_t n, const uint8_t* w, size_t row_bytes, int64_t nrows, const uint8_t* ws,
                 float* y) {
  const Q4_1Layout l(n);
  const float* scales = l.scales(ws);
  int64_t r = 0;
  if (l.pair_tail) {
    for (; r + 1 < nrows; r += 2) {
      const uint8_t* w0 = w + r * row_bytes;
      const uint8_t* w1 = w0 + row_bytes;
      PrefetchAhead(w0, 2 * row_bytes);
      const __m512 t = PairTailQ4_1x16(l, w0, w1, ws, scales);
      const __m512 a0 = RowQ4_1x16(l, w0, ws, scales, true);
      const __m512 a1 = RowQ4_1x16(l, w1, ws, scales, true);
      // Row r: a0 + t[0..8); row r+1: a1 + t[8..16).
      y[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0, _mm512_maskz_mov_ps(0x00FF, t)));
      y[r + 1] = _mm512_reduce_add_ps(_mm512_mask_add_ps(a1, 0x00FF, a1, _mm512_shuffle_f32x4(t, t, 0x4E)));
    }
  }
  for (; r < nrows; ++r) {
    PrefetchAhead(w + r * row_bytes, row_bytes);
    y[r] = _mm512_reduce_add_ps(RowQ4_1x16(l, w + r * row_bytes, ws, scales, false));
  }
}

// ---- Q8_0 x Q16_0: two blocks (64 elements, 68 weight bytes) per step ------------
// The weights w in [-128, 127] enter vpdpbusd as the unsigned bytes u = w + 128
// (w xor 0x80); sum u q16 = sum w q16 + 128 sum q16, so the accumulator starts at
// init = -sum(q16) in one lane of each block (shifted left by 7 with the hi part).
// ws: pairs of blocks (padded with zero blocks to an even number of pairs), 128 bytes each:
//   [0, 64): hi_i[0, 32), hi_i+1[0, 32)      [64, 128): lo_i, lo_i+1
// then sums: -sum(q16) per block (int32), then scales: dx per block (float).
void PrepareQ16_0x2(int64_t n, const void* xq, uint8_t* ws) {
  const auto* x = static_cast<const BlockQ16_0*>(xq);
  const int64_t nb = n / kQK;
  const int64_t np = (nb + 3) / 4 * 2;  // steps take two pairs
  auto* sums = reinterpret_cast<int32_t*>(ws + 128 * np);
  float* scales = reinterpret_cast<float*>(sums + 2 * np);
  for (int64_t i = 0; i < 2 * np; ++i) {
    uint8_t* p = ws + 128 * (i / 2) + 32 * (i % 2);
    if (i < nb) {
      std::memcpy(p, x[i].hi, 32);
      std::memcpy(p + 64, x[i].lo, 32);
      int32_t s = 0;
      for (int j = 0; j < kQK; ++j) s += Q16(x[i].hi, x[i].lo, j);
      sums[i] = -s;
      scales[i] = x[i].d;
    } else {
      std::memset(p, 0, 32);
      std::memset(p + 64, 0, 32);
      sums[i] = 0;
      scales[i] = 0.0f;
    }
  }
}

// Word indices into the 68 bytes of two Q8_0 blocks (words 0..31: the first 64
// bytes, 32..33: the next 4). Block k is words 17k (d) and 17k+1..17k+16 (qs).
alignas(64) constexpr uint16_t kQ8_0Quants[32] = {
    1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
    18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33};
// d of the two blocks of pair i (first source) and of pair i+2 (second source).
alignas(64) constexpr uint16_t kQ8_0Scales[32] = {0, 17, 32, 49};

// 16 x int32: sum of w * q16 over blocks i (lanes 0..7) and i+1 (lanes 8..15),
// from the 64 + 4 bytes a, c; init holds -sum(q16) of each block in lanes 0 and 8.
inline __m512i PairDotQ8_0(__m512i a, __m512i c, __m512i qidx, __m512i init, const uint8_t* x) {
  const __m512i u = _mm512_xor_si512(_mm512_permutex2var_epi16(a, qidx, c),
                                     _mm512_set1_epi8(static_cast<char>(0x80)));
  const __m512i p = _mm512_slli_epi32(_mm512_dpbusd_epi32(init, u, Load512(x)), 7);
  return _mm512_dpbusd_epi32(p, u, Load512(x + 64));
}

// sum_b dw_b dx_b (w_b . q16_b) over one row of nb blocks, four blocks per step
// (two pairs sharing one permute, one vcvtph2ps and one multiply for their scales).
inline float RowQ8_0x16(int64_t nb, const uint8_t* w, const uint8_t* xp, const int32_t* sums,
                        const float* xs) {
  const __m512i qidx = Load512(kQ8_0Quants);
  const __m512i didx = Load512(kQ8_0Scales);
  // Element 2k (pair i) or 2k+1 (pair i+2) of a 4-vector -> lanes 0..7 and 8..15.
  const __m512i lanes0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i lanes1 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  // Blocks i..i+3 from (a0, c0) and (a1, c1); `two`: whether blocks i+2, i+3 are taken.
  auto step = [&](int64_t i, __m512i a0, __m512i c0, __m512i a1, __m512i c1, bool two) {
    const __m128i d16 = _mm512_castsi512_si128(_mm512_permutex2var_epi16(a0, didx, a1));
    const __m512 prod = _mm512_zextps128_ps512(_mm_mul_ps(_mm_cvtph_ps(d16), _mm_loadu_ps(xs + i)));
    const __m512i s = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sums + i)));
    const __m512i p0 = PairDotQ8_0(a0, c0, qidx, _mm512_maskz_permutexvar_epi32(0x0101, lanes0, s),
                                   xp + 64 * i);
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(lanes0, prod), acc0);
    if (two) {
      const __m512i p1 = PairDotQ8_0(a1, c1, qidx, _mm512_maskz_permutexvar_epi32(0x0101, lanes1, s),
                                     xp + 64 * (i + 2));
      acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(lanes1, prod), acc1);
    }
  };
  auto tail4 = [](const uint8_t* b) {
    int32_t t;
    std::memcpy(&t, b, 4);
    return _mm512_zextsi128_si512(_mm_cvtsi32_si128(t));
  };
  const __m512i zero = _mm512_setzero_si512();
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
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void RowsQ8_0x16(int64_t n, const uint8_t* w, size_t row_bytes, int64_t nrows, const uint8_t* ws,
                 float* y) {
  const int64_t np = (n / kQK + 3) / 4 * 2;
  const auto* sums = reinterpret_cast<const int32_t*>(ws + 128 * np);
  const auto* scales = reinterpret_cast<const float*>(sums + 2 * np);
  for (int64_t r = 0; r < nrows; ++r) {
    PrefetchAhead(w + r * row_bytes, row_bytes);
    y[r] = RowQ8_0x16(n / kQK, w + r * row_bytes, ws, sums, scales);
  }
}

}  // namespace

void FillAvx512Decode16(KernelTable* t) {
  t->decode[1][static_cast<int>(DType::kQ4_1)] = {PrepareQ16_1x4, RowsQ4_1x16};
  t->decode[1][static_cast<int>(DType::kQ8_0)] = {PrepareQ16_0x2, RowsQ8_0x16};
}

}  // namespace braid::kernels::cpu
