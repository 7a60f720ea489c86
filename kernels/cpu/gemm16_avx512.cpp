// 512-bit kernels for interleaved weights (16-row groups; the layout and the
// exact fp32 operations are defined in ref/interleave_ref.cpp): Q4_1 and Q8_0
// weights against int8 or split 16-bit activations, up to 8 tokens per pass.
//
// One vpdpbusd multiplies a 64-byte chunk of weights (4 consecutive elements
// of each of the 16 rows) by one token's 4 activations broadcast to every
// lane, so a block of 32 elements is 8 vpdpbusd per token (16 with split
// 16-bit activations) into one int32 per row, then three fp32 operations per
// token: convert, scale by dw dx, and (Q4_1) add mw sx. Weights are unpacked
// once per block for all the tokens of the pass; outputs are 16 contiguous
// floats per token. Integer sums are exact, so they may be split into
// independent chains freely; the fp32 operations per (row, token) are those of
// the reference for any number of tokens (batch invariance).
#include <algorithm>
#include <cstring>

#include "cpu/avx512.h"
#include "cpu/kernel_table.h"
#include "kernels/dtype.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu {
namespace {

constexpr int kMaxTokens = kGroupPassTokens;

#include "cpu/gemm16_prepare.inc"

inline __m512i Bcast(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// One group of 16 rows against tokens [t0, t0 + T) of the prepared batch:
// y[t * ldy + i] (t from 0) for rows i with bit i of `rows`.
// `stream`: the group is read from memory for the first time, so each block
// prefetches the bytes kDecodePrefetchBytes ahead of it (the layout is one
// stream of blocks, groups one after another); `once`: no later pass reads
// the group again (PrefetchAhead).
// Within a block the loop runs chunk by chunk and, inside, token by token, so
// that consecutive vpdpbusd are independent (T chains; 2 T with split 16-bit).
template <bool kQ4, bool kSplit, int T>
void Group(int64_t nb, const uint8_t* g, const uint8_t* ws, int ntok, int t0, float* y, int64_t ldy,
           __mmask16 rows, bool stream, bool once, bool accumulate) {
  constexpr size_t kQuant = kQ4 ? 256 : 512, kScale = kQ4 ? 64 : 32;
  constexpr int kPlanes = kSplit ? 2 : 1;
  const Prepared p{nb, ntok, kSplit};
  const int width = p.Width();  // t0 is a multiple of it
  // Block b's entries for tokens t0.. (advanced by `width` entries per block).
  const uint8_t* xq = ws + 32 * p.Entry(0, t0);
  const float* dx = reinterpret_cast<const float*>(ws + p.DxOff()) + p.Entry(0, t0);
  const uint8_t* aux = ws + p.AuxOff() + 4 * p.Entry(0, t0);
  const size_t plane1 = p.Plane(1);
  __m512 acc[T];
  Unroll<T>([&](auto t) __attribute__((always_inline)) { acc[t] = _mm512_setzero_ps(); });
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + (kQuant + kScale) * b;
    if (stream) PrefetchAhead(q, kQuant + kScale, once);
    __m512i isum[T][kPlanes];
    Unroll<T>([&](auto t) __attribute__((always_inline)) {
      isum[t][0] = kQ4 ? _mm512_setzero_si512() : Bcast(aux + 4 * t);
      if constexpr (kSplit) isum[t][1] = _mm512_setzero_si512();
    });
    Unroll<8>([&](auto k) __attribute__((always_inline)) {
      __m512i w;
      if constexpr (kQ4) {
        const __m512i z = _mm512_loadu_si512(q + 64 * (k % 4));
        w = _mm512_and_si512(k < 4 ? z : _mm512_srli_epi16(z, 4), _mm512_set1_epi8(0x0F));
      } else {
        w = _mm512_loadu_si512(q + 64 * k);
      }
      Unroll<T>([&](auto t) __attribute__((always_inline)) {
        isum[t][0] = DotBcast(isum[t][0], w, xq + 32 * t + 4 * k);
        if constexpr (kSplit) isum[t][1] = DotBcast(isum[t][1], w, xq + plane1 + 32 * t + 4 * k);
      });
    });
    const uint8_t* s = q + kQuant;
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
    __m512 mw = _mm512_setzero_ps();
    if constexpr (kQ4)
      mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32)));
    Unroll<T>([&](auto t) __attribute__((always_inline)) {
      __m512i total = isum[t][0];
      if constexpr (kSplit) total = _mm512_add_epi32(_mm512_slli_epi32(isum[t][0], 7), isum[t][1]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(dw, _mm512_set1_ps(dx[t])),
                               acc[t]);
      if constexpr (kQ4) {
        float sx;
        std::memcpy(&sx, aux + 4 * t, 4);
        acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx), acc[t]);
      }
    });
    xq += 32 * static_cast<size_t>(width);
    dx += width;
    aux += 4 * static_cast<size_t>(width);
  }
  Unroll<T>([&](auto t) __attribute__((always_inline)) {
    float* yt = y + t * ldy;
    const __m512 v = accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(rows, yt), acc[t]) : acc[t];
    if (rows == 0xFFFF) {
      _mm512_storeu_ps(yt, v);  // masked stores are slow on some cores (AMD Zen 4)
    } else {
      _mm512_mask_storeu_ps(yt, rows, v);
    }
  });
}

// Groups [0, ngroups) (gbytes apart) against the ntok prepared tokens; rows of
// the last group beyond `valid_last` are not stored.
template <bool kQ4, bool kSplit>
void Run(int64_t n, const uint8_t* w, size_t gbytes, int64_t ngroups, int valid_last,
         const uint8_t* ws, int ntok, float* y, int64_t ldy, bool accumulate) {
  const int64_t nb = n / kQK;
  const bool once = ntok <= kMaxTokens;  // one pass per group: its lines are used once
  for (int64_t g = 0; g < ngroups; ++g) {
    const uint8_t* grp = w + gbytes * g;
    const int valid = g + 1 == ngroups ? valid_last : 16;
    const auto rows = static_cast<__mmask16>((1u << valid) - 1);
    float* yg = y + 16 * g;
    for (int t = 0; t < ntok; t += kMaxTokens) {
      float* yt = yg + t * ldy;
      const bool first = t == 0;
      switch (std::min(kMaxTokens, ntok - t)) {
        case 1:
          Group<kQ4, kSplit, 1>(nb, grp, ws, ntok, t, yt, ldy, rows, first, once, accumulate);
          break;
        case 2:
          Group<kQ4, kSplit, 2>(nb, grp, ws, ntok, t, yt, ldy, rows, first, once, accumulate);
          break;
        case 3:
          Group<kQ4, kSplit, 3>(nb, grp, ws, ntok, t, yt, ldy, rows, first, once, accumulate);
          break;
        case 4:
          Group<kQ4, kSplit, 4>(nb, grp, ws, ntok, t, yt, ldy, rows, first, once, accumulate);
          break;
        case 5:
          Group<kQ4, kSplit, 5>(nb, grp, ws, ntok, t, yt, ldy, rows, first, once, accumulate);
          break;
        case 6:
          Group<kQ4, kSplit, 6>(nb, grp, ws, ntok, t, yt, ldy, rows, first, once, accumulate);
          break;
        case 7:
          Group<kQ4, kSplit, 7>(nb, grp, ws, ntok, t, yt, ldy, rows, first, once, accumulate);
          break;
        default:
          Group<kQ4, kSplit, 8>(nb, grp, ws, ntok, t, yt, ldy, rows, first, once, accumulate);
          break;
      }
    }
  }
}

}  // namespace

void FillAvx512Gemm16(KernelTable* t) {
  const int q41 = static_cast<int>(DType::kQ4_1), q80 = static_cast<int>(DType::kQ8_0);
  t->group[0][q41] = {Prepare<true, false>, Run<true, false>};
  t->group[1][q41] = {Prepare<true, true>, Run<true, true>};
  t->group[0][q80] = {Prepare<false, false>, Run<false, false>};
  t->group[1][q80] = {Prepare<false, true>, Run<false, true>};
}

}  // namespace braid::kernels::cpu
