// 256-bit kernels for interleaved weights (16-row groups; the layout and the
// exact fp32 operations are defined in ref/interleave_ref.cpp): Q4_1 and Q8_0
// weights against int8 or split 16-bit activations, for CPUs with AVX2 but
// without AVX-512 VNNI (gemm16_avx512.cpp is the 512-bit version).
//
// A 64-byte chunk of a block (4 consecutive elements of each of the 16 rows)
// is two registers, rows 0-7 and rows 8-15. vpmaddubsw multiplies one by a
// token's 4 activations broadcast to every lane, giving int16 pair sums:
//   Q4_1: the unsigned nibbles (<= 15) times int8 activations (|x| <= 127)
//         keep 8 such products of a block under 2^15 (8 * 2 * 15 * 127), so
//         a block's 8 chunks add up in int16 and one vpmaddwd widens them;
//   Q8_0: the stored bytes are w + 128; |w| times x with w's sign (vpsignb)
//         stays under 2^15 per product but not for two, so each is widened
//         at once.
// Split 16-bit activations are two planes, hi (|hi| <= 127) and lo
// (|lo| <= 64), each such a product; the block's sum is 128 hi + lo.
// The integer sums are exact; per (row, token) the fp32 operations are those
// of the reference, whatever the number of tokens (batch invariance).
// Tokens go through in sub-passes of a few (the int16 sums of a sub-pass live
// in registers; more tokens would spill them), each re-reading the group,
// which stays in L1 between sub-passes.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/kernel_table.h"
#include "cpu/unroll.h"
#include "kernels/dtype.h"
#include "ref/blocks.h"

namespace braid::kernels::cpu {
namespace {

#include "cpu/gemm16_prepare.inc"

inline __m256i Bcast(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline __m256i Load(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Tokens per sub-pass: the int16 (Q4_1) or int32 (Q8_0) sums of a block,
// 2 registers per token and plane, within the 16 ymm registers.
template <bool kSplit>
constexpr int kSubPass = kSplit ? 2 : 4;

// One group of 16 rows against tokens [t0, t0 + T) of one pass of the
// prepared batch: y[t * ldy + i] (t from 0) for rows i < `valid`. `stream`
// and `once` as in gemm16_avx512.cpp.
template <bool kQ4, bool kSplit, int T>
void Group(int64_t nb, const uint8_t* g, const uint8_t* ws, int ntok, int t0, float* y, int64_t ldy,
           int valid, bool stream, bool once, bool accumulate) {
  constexpr size_t kQuant = kQ4 ? 256 : 512, kScale = kQ4 ? 64 : 32;
  constexpr int kPlanes = kSplit ? 2 : 1;
  const Prepared p{nb, ntok, kSplit};
  const int width = p.Width();
  const uint8_t* xq = ws + 32 * p.Entry(0, t0);
  const float* dx = reinterpret_cast<const float*>(ws + p.DxOff()) + p.Entry(0, t0);
  const uint8_t* aux = ws + p.AuxOff() + 4 * p.Entry(0, t0);
  const size_t plane1 = p.Plane(1);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T][2];
  Unroll<T>([&](auto t) __attribute__((always_inline)) {
    acc[t][0] = _mm256_setzero_ps();
    acc[t][1] = _mm256_setzero_ps();
  });
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + (kQuant + kScale) * b;
    if (stream) PrefetchAhead(q, kQuant + kScale, once);
    // isum[t][h]: the block's integer dot for rows 8h..8h+7 and token t.
    __m256i isum[T][2];
    if constexpr (kQ4) {
      __m256i s16[T][2][kPlanes];
      Unroll<T>([&](auto t) __attribute__((always_inline)) {
        Unroll<2 * kPlanes>([&](auto i) __attribute__((always_inline)) {
          s16[t][i / kPlanes][i % kPlanes] = _mm256_setzero_si256();
        });
      });
      Unroll<8>([&](auto k) __attribute__((always_inline)) {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        __m256i w[2];
        Unroll<2>([&](auto h) __attribute__((always_inline)) {
          const __m256i z = Load(q + 64 * (k % 4) + 32 * h);
          w[h] = _mm256_and_si256(k < 4 ? z : _mm256_srli_epi16(z, 4), m4);
        });
        Unroll<T>([&](auto t) __attribute__((always_inline)) {
          Unroll<kPlanes>([&](auto pl) __attribute__((always_inline)) {
            const __m256i x = Bcast(xq + pl * plane1 + 32 * t + 4 * k);
            Unroll<2>([&](auto h) __attribute__((always_inline)) {
              s16[t][h][pl] = _mm256_add_epi16(s16[t][h][pl], _mm256_maddubs_epi16(w[h], x));
            });
          });
        });
      });
      Unroll<T>([&](auto t) __attribute__((always_inline)) {
        Unroll<2>([&](auto h) __attribute__((always_inline)) {
          if constexpr (kSplit) {
            isum[t][h] = _mm256_add_epi32(_mm256_madd_epi16(s16[t][h][0], _mm256_set1_epi16(128)),
                                          _mm256_madd_epi16(s16[t][h][1], ones));
          } else {
            isum[t][h] = _mm256_madd_epi16(s16[t][h][0], ones);
          }
        });
      });
    } else {
      __m256i s32[T][2][kPlanes];
      Unroll<T>([&](auto t) __attribute__((always_inline)) {
        Unroll<2 * kPlanes>([&](auto i) __attribute__((always_inline)) {
          s32[t][i / kPlanes][i % kPlanes] = _mm256_setzero_si256();
        });
      });
      Unroll<8>([&](auto k) __attribute__((always_inline)) {
        __m256i w[2], aw[2];
        Unroll<2>([&](auto h) __attribute__((always_inline)) {
          w[h] = _mm256_xor_si256(Load(q + 64 * k + 32 * h),
                                  _mm256_set1_epi8(static_cast<char>(0x80)));
          aw[h] = _mm256_abs_epi8(w[h]);
        });
        Unroll<T>([&](auto t) __attribute__((always_inline)) {
          Unroll<kPlanes>([&](auto pl) __attribute__((always_inline)) {
            const __m256i x = Bcast(xq + pl * plane1 + 32 * t + 4 * k);
            Unroll<2>([&](auto h) __attribute__((always_inline)) {
              const __m256i prod = _mm256_maddubs_epi16(aw[h], _mm256_sign_epi8(x, w[h]));
              s32[t][h][pl] = _mm256_add_epi32(s32[t][h][pl], _mm256_madd_epi16(prod, ones));
            });
          });
        });
      });
      Unroll<T>([&](auto t) __attribute__((always_inline)) {
        Unroll<2>([&](auto h) __attribute__((always_inline)) {
          isum[t][h] = kSplit ? _mm256_add_epi32(_mm256_slli_epi32(s32[t][h][0], 7), s32[t][h][1])
                              : s32[t][h][0];
        });
      });
    }
    const uint8_t* s = q + kQuant;
    __m256 dw[2], mw[2];
    Unroll<2>([&](auto h) __attribute__((always_inline)) {
      dw[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16 * h)));
      if constexpr (kQ4)
        mw[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32 + 16 * h)));
    });
    Unroll<T>([&](auto t) __attribute__((always_inline)) {
      const __m256 d = _mm256_set1_ps(dx[t]);
      float sx = 0.0f;
      if constexpr (kQ4) std::memcpy(&sx, aux + 4 * t, 4);
      Unroll<2>([&](auto h) __attribute__((always_inline)) {
        acc[t][h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][h]), _mm256_mul_ps(dw[h], d), acc[t][h]);
        if constexpr (kQ4) acc[t][h] = _mm256_fmadd_ps(mw[h], _mm256_set1_ps(sx), acc[t][h]);
      });
    });
    xq += 32 * static_cast<size_t>(width);
    dx += width;
    aux += 4 * static_cast<size_t>(width);
  }
  Unroll<T>([&](auto t) __attribute__((always_inline)) {
    float* yt = y + t * ldy;
    if (valid == 16) {
      Unroll<2>([&](auto h) __attribute__((always_inline)) {
        __m256 v = acc[t][h];
        if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(yt + 8 * h), v);
        _mm256_storeu_ps(yt + 8 * h, v);
      });
    } else {
      alignas(32) float out[16];
      _mm256_store_ps(out, acc[t][0]);
      _mm256_store_ps(out + 8, acc[t][1]);
      for (int i = 0; i < valid; ++i) yt[i] = accumulate ? yt[i] + out[i] : out[i];
    }
  });
}

// Groups [0, ngroups) (gbytes apart) against the ntok prepared tokens; rows of
// the last group beyond `valid_last` are not stored.
template <bool kQ4, bool kSplit>
void Run(int64_t n, const uint8_t* w, size_t gbytes, int64_t ngroups, int valid_last,
         const uint8_t* ws, int ntok, float* y, int64_t ldy, bool accumulate) {
  constexpr int kSub = kSubPass<kSplit>;
  const int64_t nb = n / kQK;
  const int width = std::min(ntok, kGroupPassTokens);
  const bool once = ntok <= kSub;  // one pass per group: its lines are used once
  for (int64_t g = 0; g < ngroups; ++g) {
    const uint8_t* grp = w + gbytes * g;
    const int valid = g + 1 == ngroups ? valid_last : 16;
    float* yg = y + 16 * g;
    for (int pass = 0; pass < ntok; pass += width) {
      const int pass_end = std::min(ntok, pass + width);
      for (int t = pass; t < pass_end; t += kSub) {
        float* yt = yg + t * ldy;
        const bool first = t == 0;
        switch (std::min(kSub, pass_end - t)) {
          case 1:
            Group<kQ4, kSplit, 1>(nb, grp, ws, ntok, t, yt, ldy, valid, first, once, accumulate);
            break;
          case 2:
            Group<kQ4, kSplit, 2>(nb, grp, ws, ntok, t, yt, ldy, valid, first, once, accumulate);
            break;
          case 3:
            if constexpr (kSub >= 3)
              Group<kQ4, kSplit, 3>(nb, grp, ws, ntok, t, yt, ldy, valid, first, once, accumulate);
            break;
          default:
            if constexpr (kSub >= 4)
              Group<kQ4, kSplit, 4>(nb, grp, ws, ntok, t, yt, ldy, valid, first, once, accumulate);
            break;
        }
      }
    }
  }
}

}  // namespace

void FillAvx2Gemm16(KernelTable* t) {
  const int q41 = static_cast<int>(DType::kQ4_1), q80 = static_cast<int>(DType::kQ8_0);
  t->group[0][q41] = {Prepare<true, false>, Run<true, false>};
  t->group[1][q41] = {Prepare<true, true>, Run<true, true>};
  t->group[0][q80] = {Prepare<false, false>, Run<false, false>};
  t->group[1][q80] = {Prepare<false, true>, Run<false, true>};
}

}  // namespace braid::kernels::cpu
