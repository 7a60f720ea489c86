// The fused paged attention kernel on 512-bit vectors (attention_simd.inc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cpu/avx512.h"
#include "cpu/kernel_table.h"
#include "ref/ref.h"

namespace braid::kernels::cpu {
namespace {

struct Vec {
  using T = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kHeads = 4;   // 4 x 4 accumulators + 4 V vectors of 32 zmm
  static constexpr int kChunks = 4;  // head_dim 64 in one pass
  static T Zero() { return _mm512_setzero_ps(); }
  static T Set1(float f) { return _mm512_set1_ps(f); }
  static T Fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static __mmask16 Mask(int m) { return static_cast<__mmask16>((1u << m) - 1); }
  static T Load(const float* p, int m) {
    return m == kLanes ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(Mask(m), p);
  }
  static void Store(float* p, T v, int m) {
    if (m == kLanes) {
      _mm512_storeu_ps(p, v);
    } else {
      _mm512_mask_storeu_ps(p, Mask(m), v);
    }
  }
  // ((lanes 0..7 + 8..15) -> 4 -> 2 -> 1), a fixed tree.
  static T LoadHalf(const uint16_t* p) {  // 16 fp16 -> fp32
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float Sum(T v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "cpu/attention_simd.inc"

// ---- head_dim = 16 C (C <= 8): positions 16 at a time ---------------------------
// The generic kernel above reduces each score q.k_j across lanes on its own and
// keeps its accumulators in memory. Here a chunk of 16 positions is scored at
// once: 16 accumulators (one per position, C FMAs each) are folded by a
// transposing add tree into one vector whose lane i is the score of position i.
// Softmax runs on vectors (Exp below), and the weighted sum of V keeps up to
// four heads' outputs in registers. A head's numbers still depend only on its
// own q row and the cache: lane i of the tree sums only accumulator i, and each
// head's softmax and V sum touch its own scores and accumulators only.

// Row of KV head `kv_head` at positions j0, j0+1, ... (walks the block table).
// Next is forced inline: called once per position in the f16 kernels' loops,
// and left out of line it cost pp512 7% (the compiler's choice moved with
// unrelated code in this file).
struct RowWalker {
  const PagedKv& kv;
  int64_t head_off;
  int block, slot;
  RowWalker(const PagedKv& kv_, int kv_head, int j0)
      : kv(kv_),
        head_off(static_cast<int64_t>(kv_head) * kv_.head_stride),
        block(j0 / kv_.block_size),
        slot(j0 % kv_.block_size) {}
  __attribute__((always_inline)) int64_t Next() {
    const int64_t b = kv.block_table[block];
    const int64_t off = b * kv.block_stride + head_off + static_cast<int64_t>(slot) * kv.row_stride;
    if (++slot == kv.block_size) {
      slot = 0;
      ++block;
    }
    return off;
  }
};

// Lane i of the result = the sum of the 16 lanes of v[i] (a fixed tree).
inline __m512 TransposeSum16(const __m512 v[16]) {
  return TransposeReduce16(v, [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
}

// exp(x) for x <= 0: x = n ln2 + r (|r| <= ln2 / 2, ln2 in two parts), a
// degree-6 Taylor polynomial of exp(r) (relative error ~1e-7), scaled by 2^n.
// Below -87.3 the result is flushed to 0 (the reference gives at most 1e-38 there).
inline __m512 Exp(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
  return _mm512_maskz_scalef_ps(live, p, n);
}

inline __mmask16 FirstLanes(int n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1);
}

// The first n (<= 16) lanes of v to p. Masked stores are slow on some cores
// (AMD Zen 4), so whole vectors take the plain store.
inline void StoreFirst(float* p, int n, __m512 v) {
  if (n >= 16) {
    _mm512_storeu_ps(p, v);
  } else {
    _mm512_mask_storeu_ps(p, FirstLanes(n), v);
  }
}

// 16 cached elements (fp32 or fp16) as fp32.
inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 Load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline void Prefetch(const void* p, int lines) {
  for (int i = 0; i < lines; ++i)
    _mm_prefetch(reinterpret_cast<const char*>(p) + 64 * i, _MM_HINT_T0);
}
inline void PrefetchL2(const void* p, int lines) {
  for (int i = 0; i < lines; ++i)
    _mm_prefetch(reinterpret_cast<const char*>(p) + 64 * i, _MM_HINT_T1);
}

// f(integral_constant<int, C>) for head_dim = 16 C, the sizes the kernels
// below are built for; false for the others.
template <typename F>
bool WithHeadDim(int hd, F&& f) {
  switch (hd) {
    case 32:
      f(std::integral_constant<int, 2>{});
      return true;
    case 64:
      f(std::integral_constant<int, 4>{});
      return true;
    case 96:
      f(std::integral_constant<int, 6>{});
      return true;
    case 128:
      f(std::integral_constant<int, 8>{});
      return true;
    default:
      return false;
  }
}

// f(integral_constant<int, NH>) with NH = min(n, 4) (heads of one pass).
template <typename F>
void WithHeads(int n, F&& f) {
  switch (std::min(n, 4)) {
    case 1:
      f(std::integral_constant<int, 1>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 3:
      f(std::integral_constant<int, 3>{});
      break;
    default:
      f(std::integral_constant<int, 4>{});
      break;
  }
}

// The largest of s[0..len).
inline float Max(const float* s, int len) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int j = 0; j < len; j += 16)
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, FirstLanes(len - j), s + j));
  return _mm512_reduce_max_ps(mx);
}

// Scores of every head, 16 positions at a time: s[h * len + j] = scale * (q_h . k_j).
template <int C, typename E>
void Scores(const float* q, int n_q, const PagedKv& kv, int kv_head, int len, float scale,
            float* s) {
  constexpr int hd = 16 * C;
  constexpr int lines = C * static_cast<int>(sizeof(E)) / 4;  // cache lines per row
  const E* kbase = static_cast<const E*>(kv.k);
  const __m512 vscale = _mm512_set1_ps(scale);
  RowWalker walk(kv, kv_head, 0);
  // K rows are prefetched kAhead positions ahead of the chunk being scored.
  RowWalker ahead(kv, kv_head, 0);
  constexpr int kAhead = 64;
  for (int j = 0; j < std::min(kAhead, len); ++j) Prefetch(kbase + ahead.Next(), lines);
  int64_t off[16], next[16];
  const int first = std::min(16, len);
  for (int i = 0; i < first; ++i) off[i] = walk.Next();
  for (int j0 = 0; j0 < len; j0 += 16) {
    const int n = std::min(16, len - j0);
    for (int j = j0 + kAhead; j < std::min(len, j0 + kAhead + 16); ++j)
      Prefetch(kbase + ahead.Next(), lines);
    // Row offsets of the next chunk.
    const int n_next = std::min(16, len - j0 - n);
    for (int i = 0; i < n_next; ++i) next[i] = walk.Next();
    // The chunk's K rows as fp32, converted once for all heads (fp16 caches),
    // or read in place (fp32).
    alignas(64) float conv[std::is_same_v<E, float> ? 1 : 16 * hd];
    const float* rows[16];
    for (int i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<E, float>) {
        rows[i] = kbase + off[i];
      } else {
        for (int c = 0; c < C; ++c)
          _mm512_store_ps(conv + i * hd + 16 * c, Load16(kbase + off[i] + 16 * c));
        rows[i] = conv + i * hd;
      }
    }
    for (int h = 0; h < n_q; ++h) {
      const float* qh = q + static_cast<int64_t>(h) * hd;
      __m512 qv[C];
      for (int c = 0; c < C; ++c) qv[c] = _mm512_loadu_ps(qh + 16 * c);
      __m512 acc[16];
      for (int i = 0; i < 16; ++i) {
        acc[i] = _mm512_setzero_ps();
        if (i < n) {
          for (int c = 0; c < C; ++c)
            acc[i] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(rows[i] + 16 * c), acc[i]);
        }
      }
      StoreFirst(s + static_cast<int64_t>(h) * len + j0, n,
                 _mm512_mul_ps(TransposeSum16(acc), vscale));
    }
    for (int i = 0; i < n_next; ++i) off[i] = next[i];
  }
}

// Scores from dimension-major K tiles of 16 positions (block_size 16): per
// dimension d, one vector of K[d] for the 16 positions of the block meets each
// head's q[d] (broadcast), no lane reduction at all. Each head keeps four FMA
// chains (dimensions d = 0, 1, 2, 3 mod 4, each in dimension order), added as
// (c0 + c1) + (c2 + c3): enough independent chains to hide the FMA latency.
template <int C, typename E>
void ScoresTransposed(const float* q, int n_q, const PagedKv& kv, int kv_head, int len, float scale,
                      float* s) {
  constexpr int hd = 16 * C;
  constexpr int kHeads = 4;  // per pass over a tile (4 chains each: 16 accumulators)
  constexpr int tile_lines = hd * static_cast<int>(sizeof(E)) / 4;  // 16 elements per dimension
  const E* kbase = static_cast<const E*>(kv.k);
  const int64_t head_off = static_cast<int64_t>(kv_head) * kv.head_stride;
  const __m512 vscale = _mm512_set1_ps(scale);
  const int nblocks = (len + 15) / 16;
  auto tile = [&](int b) { return kbase + kv.block_table[b] * kv.block_stride + head_off; };
  constexpr int kAheadBlocks = 4;
  for (int b = 0; b < std::min(kAheadBlocks, nblocks); ++b) Prefetch(tile(b), tile_lines);
  for (int b = 0; b < nblocks; ++b) {
    if (b + kAheadBlocks < nblocks) Prefetch(tile(b + kAheadBlocks), tile_lines);
    const E* t = tile(b);
    const int n = std::min(16, len - 16 * b);
    // Heads [h0, h0 + NH) over the tile, the head count fixed at compile time so
    // that the accumulators stay in registers (one broadcast-operand FMA per
    // head and dimension).
    auto heads = [&]<int NH>(int h0, std::integral_constant<int, NH>) {
      __m512 acc[NH][4];
      Unroll<NH>([&](auto h) { Unroll<4>([&](auto c) { acc[h][c] = _mm512_setzero_ps(); }); });
      const float* qh = q + static_cast<int64_t>(h0) * hd;
      for (int d = 0; d < hd; d += 4) {
        Unroll<4>([&](auto c) {
          const __m512 k = Load16(t + 16 * (d + c));
          Unroll<NH>([&](auto h) {
            acc[h][c] = _mm512_fmadd_ps(_mm512_set1_ps(qh[h * hd + d + c]), k, acc[h][c]);
          });
        });
      }
      Unroll<NH>([&](auto h) {
        const __m512 sum =
            _mm512_add_ps(_mm512_add_ps(acc[h][0], acc[h][1]), _mm512_add_ps(acc[h][2], acc[h][3]));
        StoreFirst(s + static_cast<int64_t>(h0 + h) * len + 16 * b, n, _mm512_mul_ps(sum, vscale));
      });
    };
    for (int h0 = 0; h0 < n_q; h0 += kHeads) WithHeads(n_q - h0, [&](auto nh) { heads(h0, nh); });
  }
}

// s[0..len) -> exp(s - max s) in place; returns 1 / sum.
inline float SoftmaxUnnormalized(float* s, int len) {
  const __m512 m = _mm512_set1_ps(Max(s, len));
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < len; j += 16) {
    const __mmask16 k = FirstLanes(len - j);
    const __m512 e = _mm512_maskz_mov_ps(k, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), m)));
    StoreFirst(s + j, len - j, e);
    sum = _mm512_add_ps(sum, e);
  }
  return 1.0f / Vec::Sum(sum);
}

// out_h = inv_h * sum_j e_hj v_j for NH heads, in position order.
template <int C, int NH, typename E>
void WeightedValues(const float* e, int len, const PagedKv& kv, int kv_head, const float* inv,
                    float* out) {
  constexpr int hd = 16 * C;
  constexpr int lines = C * static_cast<int>(sizeof(E)) / 4;
  const E* vbase = static_cast<const E*>(kv.v);
  __m512 acc[NH][C];
  Unroll<NH>([&](auto h) { Unroll<C>([&](auto c) { acc[h][c] = _mm512_setzero_ps(); }); });
  RowWalker walk(kv, kv_head, 0);
  RowWalker ahead(kv, kv_head, 0);
  constexpr int kAhead = 32;
  for (int j = 0; j < std::min(kAhead, len); ++j) Prefetch(vbase + ahead.Next(), lines);
  for (int j = 0; j < len; ++j) {
    if (j + kAhead < len) Prefetch(vbase + ahead.Next(), lines);
    const E* v = vbase + walk.Next();
    __m512 vv[C];
    Unroll<C>([&](auto c) { vv[c] = Load16(v + 16 * c); });
    Unroll<NH>([&](auto h) {
      const __m512 p = _mm512_set1_ps(e[static_cast<int64_t>(h) * len + j]);
      Unroll<C>([&](auto c) { acc[h][c] = _mm512_fmadd_ps(p, vv[c], acc[h][c]); });
    });
  }
  Unroll<NH>([&](auto h) {
    Unroll<C>([&](auto c) {
      _mm512_storeu_ps(out + h * hd + 16 * c, _mm512_mul_ps(acc[h][c], _mm512_set1_ps(inv[h])));
    });
  });
}

template <int C, typename E>
void AttendChunked(const float* q, int n_q, const PagedKv& kv, int kv_head, int len, float scale,
                   float* scratch, float* out) {
  constexpr int hd = 16 * C;
  if (kv.k_transposed) {
    ScoresTransposed<C, E>(q, n_q, kv, kv_head, len, scale, scratch);
  } else {
    Scores<C, E>(q, n_q, kv, kv_head, len, scale, scratch);
  }
  for (int h0 = 0; h0 < n_q; h0 += 4) {
    const int nh = std::min(4, n_q - h0);
    float inv[4];
    for (int h = 0; h < nh; ++h)
      inv[h] = SoftmaxUnnormalized(scratch + static_cast<int64_t>(h0 + h) * len, len);
    const float* e = scratch + static_cast<int64_t>(h0) * len;
    float* o = out + static_cast<int64_t>(h0) * hd;
    WithHeads(nh, [&](auto heads) { WeightedValues<C, heads, E>(e, len, kv, kv_head, inv, o); });
  }
}

// ref::QuantizeQuery on vectors (the same numbers: max and integer sums are
// exact, and the conversion rounds to nearest even as nearbyint does).
template <int C>
float QuantizeQuery(const float* q, int8_t* qi, int32_t* sum) {
  __m512 amax = _mm512_setzero_ps();
  Unroll<C>(
      [&](auto c) { amax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(q + 16 * c)), amax); });
  const float qs = _mm512_reduce_max_ps(amax) / 127.0f;
  const __m512 inv = _mm512_set1_ps(qs > 0.0f ? 1.0f / qs : 0.0f);
  __m512i total = _mm512_setzero_si512();
  Unroll<C>([&](auto c) {
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(q + 16 * c), inv));
    v = _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
    total = _mm512_add_epi32(total, v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qi + 16 * c), _mm512_cvtepi32_epi8(v));
  });
  *sum = _mm512_reduce_add_epi32(total);
  return qs;
}

// The next item's lines, fetched into L2 a few at a time while the current
// item computes (AttendNext, kernels/attention.h): block by block its K tile,
// V tile, K scale line and V scale line, a fixed number of lines at fixed
// points of the loops.
class NextItemFetch {
 public:
  NextItemFetch() = default;
  NextItemFetch(const PagedKv& kv, int hd, const AttendNext& n)
      : k_(static_cast<const uint8_t*>(kv.k) + static_cast<int64_t>(n.kv_head) * kv.head_stride),
        v_(static_cast<const uint8_t*>(kv.v) + static_cast<int64_t>(n.kv_head) * kv.head_stride),
        ks_(kv.k_scale + static_cast<int64_t>(n.kv_head) * kv.block_size),
        vs_(kv.v_scale + static_cast<int64_t>(n.kv_head) * kv.block_size),
        table_(n.block_table),
        block_stride_(kv.block_stride),
        scale_stride_(kv.scale_block_stride),
        tile_lines_(kv.block_size * hd / 64),
        blocks_((n.len + kv.block_size - 1) / kv.block_size) {
    Segment();
  }
  bool Any() const { return blocks_ > 0; }
  // Paced for an item of `blocks` tiles: each Issue<N> takes N lines per time
  // the next item's tiles outnumber them (rounded up).
  void Pace(int blocks) { reps_ = std::max(1, (blocks_ + blocks - 1) / std::max(blocks, 1)); }
  // The next N lines (times the pace; none past the last).
  template <int N>
  void Issue() {
    for (int r = 0; r < reps_; ++r) Lines<N>();
  }
  // Every line not yet issued.
  void Rest() {
    while (left_ > 0) Lines<16>();
  }

 private:
  template <int N>
  void Lines() {
    Unroll<N>([&](auto) {
      if (left_ == 0) return;
      _mm_prefetch(p_, _MM_HINT_T1);
      p_ += 64;
      if (--left_ == 0) Segment();
    });
  }
  // Points p_ at the next run of lines: segment seg_ % 4 of block seg_ / 4.
  void Segment() {
    const int b = seg_ / 4;
    if (b >= blocks_) return;
    const int64_t t = table_[b];
    switch (seg_++ % 4) {
      case 0:
        p_ = reinterpret_cast<const char*>(k_ + t * block_stride_);
        left_ = tile_lines_;
        break;
      case 1:
        p_ = reinterpret_cast<const char*>(v_ + t * block_stride_);
        left_ = tile_lines_;
        break;
      case 2:
        p_ = reinterpret_cast<const char*>(ks_ + t * scale_stride_);
        left_ = 1;
        break;
      default:
        p_ = reinterpret_cast<const char*>(vs_ + t * scale_stride_);
        left_ = 1;
        break;
    }
  }
  // The item's KV head's rows and scales in block 0 of the layer.
  const uint8_t* k_ = nullptr;
  const uint8_t* v_ = nullptr;
  const float* ks_ = nullptr;
  const float* vs_ = nullptr;
  const int32_t* table_ = nullptr;
  int64_t block_stride_ = 0, scale_stride_ = 0;
  int tile_lines_ = 0, blocks_ = 0;
  int seg_ = 0, left_ = 0;  // the next run of lines, and those left in the current one
  int reps_ = 1;
  const char* p_ = nullptr;
};

// ---- kQ8: integer dot products on both sides of the softmax -----------------
// (kernels/attention.h; block_size 16, head_dim 16 C.) Per tile of 16
// positions: the scores of NH heads from 16 C / 4 vpdpbusd each (K's 4-dimension
// groups against the head's 4 quantized q values, broadcast), and the weighted
// sum from 4 C vpdpbusd per head (V's 4-position groups against the head's 4
// uint8 weights, broadcast). Integer sums are exact, so the only rounding left
// is in the scale products, the softmax and the weights' quantization, each a
// per-head sequence of fp32 operations fixed by the reference.
template <int C, int NH>
void AttendQ8Heads(const float* q, const PagedKv& kv, int kv_head, int len, float scale, float* s,
                   float* out, NextItemFetch& next) {
  constexpr int hd = 16 * C;
  constexpr int kGroups = hd / 4;
  const auto* kbase = static_cast<const uint8_t*>(kv.k);
  const auto* vbase = static_cast<const int8_t*>(kv.v);
  const int64_t head_off = static_cast<int64_t>(kv_head) * kv.head_stride;
  const int64_t scale_head_off = static_cast<int64_t>(kv_head) * 16;
  const int nblocks = (len + 15) / 16;
  auto tile = [&](int b) { return kv.block_table[b] * kv.block_stride + head_off; };
  auto scales = [&](const float* base, int b) {
    return _mm512_loadu_ps(base + kv.block_table[b] * kv.scale_block_stride + scale_head_off);
  };

  // The heads' q as int8, 4 dimensions per int32 (broadcast as one operand).
  alignas(64) int32_t qd[NH][kGroups];
  __m512i corr[NH];
  float c[NH];
  for (int h = 0; h < NH; ++h) {
    int8_t qi[hd];
    int32_t qsum = 0;
    c[h] = QuantizeQuery<C>(q + h * hd, qi, &qsum) * scale;
    std::memcpy(qd[h], qi, hd);
    corr[h] = _mm512_set1_epi32(128 * qsum);
  }

  // Scores: s[h * len + j].
  // Tiles (hd / 4 cache lines) are prefetched kAhead ahead, with their K and V
  // scales (one line each: the V scales are read by the softmax pass below);
  // past the last K tile, the first V tiles, so that the stream from memory
  // does not stop between the passes.
  constexpr int kAhead = 4;
  auto prefetch = [&](int b) {
    if (b >= nblocks) {
      if (b < 2 * nblocks) Prefetch(vbase + tile(b - nblocks), hd / 4);
      return;
    }
    Prefetch(kbase + tile(b), hd / 4);
    const int64_t so = kv.block_table[b] * kv.scale_block_stride + scale_head_off;
    Prefetch(kv.k_scale + so, 1);
    Prefetch(kv.v_scale + so, 1);
  };
  // The next item's lines, spread over this item's three passes (K,
  // softmax, V), a fixed number at fixed points of the loops: two per pair
  // of K groups (its K tile's lines per tile), four per head's softmax tile
  // and (3 C + 3) / 4 per V group; for an equally long next item that is all
  // of its lines by ~85% of this item's time, and what is left is issued at
  // the end. The fetch has to trickle out: a tile's share at once was 3%
  // slower at 16 concurrent, a whole block per tile 15-25% (attention_bench).
  // And it has to be cheap: counted loops whose trip counts vary from call to
  // call (the quota of each point computed per item) cost 40% of a cached
  // item's time (attention_bench, context 320 with 1 distinct layer, one
  // thread: 1.78 ms, 1.11 without the fetch, 1.50 with the fixed points).
  // Without a next item, this one was not fetched by its predecessor: its V
  // tiles go to L2 now, so that their misses overlap the K pass
  // (attention_bench: ~8% more bytes/s on one thread).
  next.Pace(nblocks);
  if (!next.Any())
    for (int b = 0; b < nblocks; ++b) PrefetchL2(vbase + tile(b), hd / 4);
  for (int b = 0; b < kAhead; ++b) prefetch(b);
  for (int b = 0; b < nblocks; ++b) {
    prefetch(b + kAhead);
    const uint8_t* t = kbase + tile(b);
    __m512i acc[NH][2];
    Unroll<NH>([&](auto h) { Unroll<2>([&](auto i) { acc[h][i] = _mm512_setzero_si512(); }); });
    for (int g = 0; g < kGroups; g += 2) {
      next.Issue<2>();
      Unroll<2>([&](auto i) {
        const __m512i k = _mm512_loadu_si512(t + 64 * (g + i));
        Unroll<NH>([&](auto h) { acc[h][i] = DotBcast(acc[h][i], k, &qd[h][g + i]); });
      });
    }
    const __m512 ks = scales(kv.k_scale, b);
    Unroll<NH>([&](auto h) {
      const __m512i dot = _mm512_sub_epi32(_mm512_add_epi32(acc[h][0], acc[h][1]), corr[h]);
      StoreFirst(s + h * len + 16 * b, len - 16 * b,
                 _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ks, _mm512_set1_ps(c[h]))));
    });
  }

  // Softmax numerators times the V scales, w = e * vscale, in place; the
  // weights' quantization scale r (255 / max w) and the output scale.
  float r[NH], back[NH];
  for (int h = 0; h < NH; ++h) {
    float* sh = s + h * len;
    const __m512 m = _mm512_set1_ps(Max(sh, len));
    __m512 sum = _mm512_setzero_ps(), wmax = _mm512_setzero_ps();
    for (int b = 0; b < nblocks; ++b) {
      next.Issue<4>();
      const __mmask16 live = FirstLanes(len - 16 * b);
      const __m512 e = _mm512_maskz_mov_ps(
          live, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, sh + 16 * b), m)));
      sum = _mm512_add_ps(sum, e);
      const __m512 w = _mm512_mul_ps(e, scales(kv.v_scale, b));
      wmax = _mm512_max_ps(wmax, w);
      StoreFirst(sh + 16 * b, len - 16 * b, w);
    }
    const float wm = _mm512_reduce_max_ps(wmax);
    r[h] = wm > 0.0f ? 255.0f / wm : 0.0f;
    back[h] = wm / 255.0f * (1.0f / Vec::Sum(sum));
  }

  // out_h = back_h * sum_j u_hj v_j, int32 sums over runs of kQ8AttentionRun positions.
  for (int h = 0; h < NH; ++h) std::fill(out + h * hd, out + (h + 1) * hd, 0.0f);
  constexpr int kRunTiles = ref::kQ8AttentionRun / 16;
  for (int b0 = 0; b0 < nblocks; b0 += kRunTiles) {
    const int b1 = std::min(nblocks, b0 + kRunTiles);
    __m512i acc[NH][C];
    Unroll<NH>([&](auto h) { Unroll<C>([&](auto i) { acc[h][i] = _mm512_setzero_si512(); }); });
    for (int b = b0; b < b1; ++b) {
      if (b + kAhead < b1) Prefetch(vbase + tile(b + kAhead), hd / 4);
      const int8_t* t = vbase + tile(b);
      // The tile's weights as uint8, 4 positions per int32 (zero past len).
      alignas(64) int32_t u[NH][4];
      const __mmask16 live = FirstLanes(len - 16 * b);
      Unroll<NH>([&](auto h) {
        const __m512 w = _mm512_maskz_loadu_ps(live, s + h * len + 16 * b);
        _mm_store_si128(
            reinterpret_cast<__m128i*>(u[h]),
            _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(w, _mm512_set1_ps(r[h])))));
      });
      Unroll<4>([&](auto g) {
        next.Issue<(3 * C + 3) / 4>();
        Unroll<C>([&](auto i) {
          const __m512i v = _mm512_loadu_si512(t + g * 4 * hd + 64 * i);
          Unroll<NH>([&](auto h) {
            // u8 weights times s8 values: the broadcast operand is the unsigned one here.
            acc[h][i] = _mm512_dpbusd_epi32(acc[h][i], _mm512_set1_epi32(u[h][g]), v);
          });
        });
      });
    }
    Unroll<NH>([&](auto h) {
      Unroll<C>([&](auto i) {
        float* o = out + h * hd + 16 * i;
        _mm512_storeu_ps(
            o, _mm512_add_ps(_mm512_loadu_ps(o), _mm512_mul_ps(_mm512_cvtepi32_ps(acc[h][i]),
                                                               _mm512_set1_ps(back[h]))));
      });
    });
  }
  next.Rest();
}

// The heads in passes of up to four; the next item's lines are fetched during
// the first pass.
template <int C>
void AttendQ8(const float* q, int n_q, const PagedKv& kv, int kv_head, int len, float scale,
              float* scratch, float* out, const AttendNext* next) {
  constexpr int hd = 16 * C;
  NextItemFetch fetch = next != nullptr ? NextItemFetch(kv, hd, *next) : NextItemFetch();
  for (int h0 = 0; h0 < n_q; h0 += 4) {
    const float* qh = q + static_cast<int64_t>(h0) * hd;
    float* s = scratch + static_cast<int64_t>(h0) * len;
    float* o = out + static_cast<int64_t>(h0) * hd;
    WithHeads(n_q - h0, [&](auto heads) {
      AttendQ8Heads<C, heads>(qh, kv, kv_head, len, scale, s, o, fetch);
    });
  }
}

void AttendPagedAvx512(const float* q, int n_q, int hd, const PagedKv& kv, int kv_head, int len,
                       float scale, float* scratch, float* out) {
  const bool tiles16 = kv.block_size == 16;
  if ((kv.k_transposed || kv.type == KvType::kQ8) && !tiles16)
    return ref::AttendPaged(q, n_q, hd, kv, kv_head, len, scale, scratch, out);
  const bool done = WithHeadDim(hd, [&](auto c) {
    switch (kv.type) {
      case KvType::kF32:
        AttendChunked<c, float>(q, n_q, kv, kv_head, len, scale, scratch, out);
        break;
      case KvType::kF16:
        AttendChunked<c, uint16_t>(q, n_q, kv, kv_head, len, scale, scratch, out);
        break;
      case KvType::kQ8:
        AttendQ8<c>(q, n_q, kv, kv_head, len, scale, scratch, out, nullptr);
        break;
    }
  });
  // Other head sizes: the generic kernel reads fp32 and fp16 rows (of whole
  // vectors); the rest goes to the reference.
  if (!done) AttendPagedSimd(q, n_q, hd, kv, kv_head, len, scale, scratch, out);
}

// KernelTable::attend_next: the q8 kernel, which spreads the next item's
// fetch over its own work; false (nothing done) for the other caches.
bool AttendNextAvx512(const float* q, int n_q, int hd, const PagedKv& kv, int kv_head, int len,
                      float scale, float* scratch, float* out, const AttendNext& next) {
  if (kv.type != KvType::kQ8 || kv.block_size != 16) return false;
  return WithHeadDim(
      hd, [&](auto c) { AttendQ8<c>(q, n_q, kv, kv_head, len, scale, scratch, out, &next); });
}

// ref::StoreRowQ8 on vectors (block_size 16, the head sizes of WithHeadDim;
// else the reference): the row quantized as a query head is (QuantizeQuery,
// the same numbers), then laid out in the tile.
float StoreRowQ8Avx512(const float* x, int hd, int bs, int slot, bool value, uint8_t* tile) {
  float scale = 0.0f;
  const bool done =
      bs == 16 && WithHeadDim(hd, [&](auto c) {
        constexpr int kHd = 16 * c;
        alignas(16) int8_t q[kHd];
        int32_t sum;
        scale = QuantizeQuery<c>(x, q, &sum);
        if (value) {
          // Byte slot % 4 of every int32 of the slot group's rows: element i at
          // 4 i + slot % 4. A masked store writes those bytes only: the other three
          // slots' bytes may be written at the same time by other threads (tokens
          // of one prefill chunk), so no read-modify-write of the whole line.
          uint8_t* group = tile + (slot / 4) * 4 * kHd;
          const __mmask64 lane = 0x1111111111111111ULL << (slot % 4);
          Unroll<c>([&](auto i) {
            const __m512i v =
                _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 16 * i)));
            _mm512_mask_storeu_epi8(group + 64 * i, lane, _mm512_slli_epi32(v, 8 * (slot % 4)));
          });
        } else {
          // K: the 4 elements of group d / 4 as one int32 at (d / 4) * 64 + 4 slot,
          // each q + 128 (the sign bit flipped).
          for (int g = 0; g < kHd / 4; ++g) {
            uint32_t word;
            std::memcpy(&word, q + 4 * g, 4);
            word ^= 0x80808080u;
            std::memcpy(tile + 64 * g + 4 * slot, &word, 4);
          }
        }
      });
  return done ? scale : ref::StoreRowQ8(x, hd, bs, slot, value, tile);
}

// fp16 caches: the specialized head sizes, and the generic kernel's.
bool FastF16Avx512(int hd) {
  return WithHeadDim(hd, [](auto) {}) || FastF16Simd(hd);
}
// Dimension-major K tiles (and q8): the specialized head sizes only.
bool FastTransposedAvx512(int hd, int block_size) {
  return WithHeadDim(hd, [](auto) {}) && block_size == 16;
}

}  // namespace

void FillAvx512Attention(KernelTable* t) {
  t->attend = AttendPagedAvx512;
  t->attend_next = AttendNextAvx512;
  t->store_row_q8 = StoreRowQ8Avx512;
  t->attend_from = AttendPagedSimdFrom;
  t->attend_fast_f16 = FastF16Avx512;
  t->attend_fast_transposed = FastTransposedAvx512;
}

}  // namespace braid::kernels::cpu
