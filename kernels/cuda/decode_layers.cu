// DecodeLayers (kernels/cuda_ops.h): every layer of a one-token decode step
// in one persistent launch.
//
// One block per multiprocessor; warp kConsumerWarps of each block loads,
// the others compute. The loader's lane 0 walks the block's share of every
// matrix of every layer in the order they are used (Q/K/V, Wo, gate/up,
// down) and copies it into a ring of kChunk-byte stages with bulk copies
// (cp.async.bulk, completing on the stage's "full" mbarrier); it reuses a
// stage once every computing warp has arrived on its "empty" mbarrier. It
// never waits for data, so while the computing warps wait for a phase's
// input the ring fills with the next phase's weights.
//
// A block's share of a matrix is a contiguous run of rows (of a gate/up
// pair at a time), so its bytes are contiguous; a stage holds whole rows,
// or, for rows longer than a stage, an equal part of one row. The
// computing warps take a stage's 16-byte pieces against the phase's input
// (bf16, in shared memory), each warp summing its pieces of a row and
// adding the sum into its own slot of the row's accumulator (so the order
// of the sums is fixed: the result does not depend on timing); at the end
// of the phase the slots are summed and the outputs written.
//
// Phases meet through counters in global memory, each raised by a block
// when its part is written (a release add) and read with acquire
// loads; the last block to leave sets them back to zero.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cstdint>

#include "device.cuh"
#include "kernels/cuda_ops.h"
#include "layers_plan.h"

namespace braid::kernels::cuda {
namespace {

using namespace dev;
using namespace layers;

constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kThreads = kConsumers + 32;
constexpr int kMaxStages = 16;
constexpr int kBarBytes = 2 * kMaxStages * 8;
constexpr float kLog2e = 1.4426950408889634f;

// Counters of a layer: offsets into its run of 5 + n_kv.
enum Counter { kQkvDone, kAttDone, kWoDone, kGuDone, kDownDone, kRanges };

struct Plan {
  int blocks = 0;                                // the grid: one block per multiprocessor
  int stages = 0;                                // of the ring
  int n_split = 1;                               // attention blocks per KV head
  int pieces_d = 1, pieces_q = 1, pieces_f = 1;  // stages a row of k = d, n_head hd, n_ff takes
  int max_rows = 0;                              // the most rows of one phase a block takes
  int acc_off = 0, scr_off = 0, ring_off = 0;    // shared memory layout (bytes)
  int smem = 0;
};

// ---- mbarriers, bulk copies, counters ----

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void MbarInit(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void MbarExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SmemAddr(bar)) : "memory");
}
// Waits until the phase of the barrier with this parity has completed.
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(SmemAddr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void BulkCopy(void* dst, const void* src, uint32_t bytes,
                                         uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SmemAddr(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddr(bar))
      : "memory");
}
__device__ __forceinline__ int LoadAcquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A barrier of the computing warps only (the loader never joins).
__device__ __forceinline__ void ConsumerSync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}
// Sum over the computing threads; red holds kConsumerWarps floats.
__device__ float ConsumerSum(float v, float* red) {
  v = WarpSum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  ConsumerSync();
  float total = 0;
  for (int w = 0; w < kConsumerWarps; ++w) total += red[w];
  ConsumerSync();
  return total;
}
// Waits (thread 0 polls, the others meet it) until *c reaches target
// (unless told not to wait, DecodeLayersArgs::no_waits).
__device__ void WaitCount(const int* c, int target, bool skip) {
  if (threadIdx.x == 0 && !skip)
    while (LoadAcquire(c) < target) {
    }
  ConsumerSync();
}
// Raises *c once every computing thread's writes are done (the barrier
// orders them before thread 0's release).
__device__ void Signal(int* c) {
  ConsumerSync();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(c) : "memory");
}

// The trace's mark m of layer l (DecodeLayersArgs::trace), by thread 0.
__device__ void Mark(const DecodeLayersArgs& a, int l, int m) {
  if (a.trace == nullptr || threadIdx.x != 0) return;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  a.trace[(static_cast<int64_t>(l) * kDecodeLayersMarks + m) * gridDim.x + blockIdx.x] =
      static_cast<int64_t>(t);
}

// ---- a block's share of a matrix, in stages ----

// Phase p (0 Q/K/V, 1 Wo, 2 gate/up, 3 down) of layer L.
__device__ Share PhaseShare(const DecodeLayersArgs& a, const Plan& pl, const DecodeLayer& L,
                            int p) {
  const int q_dim = a.n_head * a.head_dim, b = blockIdx.x, G = pl.blocks;
  switch (p) {
    case 0:
      return ShareOf(L.wqkv, q_dim + 2 * a.n_kv * a.head_dim, a.d, 1, pl.pieces_d, b, G);
    case 1:
      return ShareOf(L.wo, a.d, q_dim, 1, pl.pieces_q, b, G);
    case 2:
      return ShareOf(L.wgu, 2 * a.n_ff, a.d, 2, pl.pieces_d, b, G);
    default:
      return ShareOf(L.wdown, a.d, a.n_ff, 1, pl.pieces_f, b, G);
  }
}
// The stage in use and the parity of its barriers' current phase.
struct RingPos {
  int st = 0;
  uint32_t parity = 0;
};
__device__ __forceinline__ void NextStage(RingPos& r, int stages) {
  if (++r.st == stages) r.st = 0, r.parity ^= 1;
}

// The loader: every stage of every phase of every layer, in order.
__device__ void Load(const DecodeLayersArgs& a, const Plan& pl, uint8_t* ring, uint64_t* full,
                     uint64_t* empty) {
  auto share = [&](int l, int p) { return PhaseShare(a, pl, a.layers[l], p); };
  Cursor q;
  Advance(q, a.n_layer, share);
  for (RingPos r; q.l < a.n_layer; Advance(q, a.n_layer, share), NextStage(r, pl.stages)) {
    const Chunk ch = ChunkOf(q.s, q.c);
    const uint32_t bytes = static_cast<uint32_t>(ch.nr) * ch.kk * 2;
    MbarWait(&empty[r.st], r.parity ^ 1);
    MbarExpectTx(&full[r.st], bytes);
    BulkCopy(ring + static_cast<size_t>(r.st) * kChunk,
             q.s.w + static_cast<int64_t>(ch.r0) * q.s.k + ch.k0, bytes, &full[r.st]);
  }
}

// a += the even, b += the odd products of 8 bf16 weights and 8 bf16 inputs.
__device__ __forceinline__ void Dot8(uint4 w, uint4 x, float& a, float& b) {
  const uint32_t wa[4] = {w.x, w.y, w.z, w.w}, xa[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    a = fmaf(__uint_as_float(wa[i] << 16), __uint_as_float(xa[i] << 16), a);
    b = fmaf(__uint_as_float(wa[i] & 0xffff0000u), __uint_as_float(xa[i] & 0xffff0000u), b);
  }
}

// A lane's part of the dot product of n runs of 32 16-byte pieces, the
// weights from w and the input from x (the first run's first byte and
// element), on CUDA cores: four runs at a time into eight sums.
__device__ __forceinline__ float FmaRuns(const uint8_t* w, const uint16_t* x, int n) {
  const int lane = threadIdx.x % 32;
  const uint4* wp = reinterpret_cast<const uint4*>(w) + lane;
  const uint4* xp = reinterpret_cast<const uint4*>(x) + lane;
  float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    uint4 wr[4], xr[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) wr[i] = wp[(j + i) * 32], xr[i] = xp[(j + i) * 32];
#pragma unroll
    for (int i = 0; i < 4; ++i) Dot8(wr[i], xr[i], a[2 * i], a[2 * i + 1]);
  }
  for (; j < n; ++j) Dot8(wp[j * 32], xp[j * 32], a[0], a[1]);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// d += A B on tensor cores (m16n8k16, bf16 in, fp32 accumulate), where A's
// rows 8-15 are zero: a holds A's rows 0-7 (registers 0 and 2 of the
// fragment), b the whole of B.
__device__ __forceinline__ void MmaRows8(uint2 a, uint2 b, float* d) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a.x), "r"(0u), "r"(a.y), "r"(0u), "r"(b.x), "r"(b.y));
}

// FmaRuns on tensor cores: each 512-byte run two products of a 16 x 8 x 16
// tile. For 128 elements of a row (256 bytes), lane i takes elements
// 4i..4i+3 of the weights (as B) and of the input (as A's row i / 4), so
// that A's row g and B's column g hold the same 16 elements of group g, in
// the same order: the diagonal D[g][g] is the dot product of group g, and
// the diagonal's sum that of the 128 elements. D accumulates over the
// runs; the rest of D is not read. The diagonal lies in lanes 9g (element
// 0, g even) and 9g + 4 (element 1, g odd); the other lanes give 0.
__device__ __forceinline__ float MmaRuns(const uint8_t* w, const uint16_t* x, int n) {
  const int lane = threadIdx.x % 32;
  const uint2* wp = reinterpret_cast<const uint2*>(w) + lane;
  const uint2* xp = reinterpret_cast<const uint2*>(x) + lane;
  float d[4][4] = {};
  int j = 0;
  for (; j + 4 <= n; j += 4) {  // four runs: eight tiles
    uint2 wr[8], xr[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) wr[i] = wp[(2 * j + i) * 32], xr[i] = xp[(2 * j + i) * 32];
#pragma unroll
    for (int i = 0; i < 8; ++i) MmaRows8(xr[i], wr[i], d[i % 4]);
  }
  for (; j < n; ++j) {
    MmaRows8(xp[2 * j * 32], wp[2 * j * 32], d[0]);
    MmaRows8(xp[(2 * j + 1) * 32], wp[(2 * j + 1) * 32], d[1]);
  }
  const int g = lane % 9;
  float v = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) v += g == 0 ? d[i][0] : g == 4 ? d[i][1] : 0.0f;
  return v;
}

// The computing warps' part of a phase's product: every stage of the share
// against xs, into acc[row - row0][warp]. Each warp takes its runs of 32
// of a stage's 16-byte pieces (WarpRuns), a segment of one row at a time
// (runs: FmaRuns or MmaRuns), and adds one warp sum per row it touches
// (mostly one a stage) into its slot.
template <typename Runs>
__device__ void Product(const Share& s, const uint16_t* xs, float* acc, const uint8_t* ring,
                        uint64_t* full, uint64_t* empty, int stages, RingPos& rp, Runs runs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_row = s.k / s.pieces / 8;  // pieces of a row in a stage
  for (int c = 0; c < s.chunks; ++c, NextStage(rp, stages)) {
    const Chunk ch = ChunkOf(s, c);
    const uint8_t* stage = ring + static_cast<size_t>(rp.st) * kChunk;
    MbarWait(&full[rp.st], rp.parity);
    WarpRuns(ch, per_row, warp, [&](int row, int col, int u, int n) {
      const float v = WarpSum(runs(stage + u * 512, xs + ch.k0 + col * 8, n));
      if (lane == 0) acc[(ch.r0 - s.row0 + row) * kConsumerWarps + warp] += v;
    });
    __syncwarp();
    if (lane == 0) MbarArrive(&empty[rp.st]);
  }
}

// The row sums of a phase: fn(r, total) for each of its rows r (local to
// the share); the slots are left zero for the next phase.
template <typename Fn>
__device__ void RowSums(const Share& s, float* acc, int step, Fn fn) {
  ConsumerSync();
  const int rows = s.row1 - s.row0;
  for (int r = threadIdx.x * step; r < rows; r += kConsumers * step) {
    float t[2] = {0, 0};
    for (int j = 0; j < step; ++j) {
      float* slot = acc + (r + j) * kConsumerWarps;
      for (int w = 0; w < kConsumerWarps; ++w) {
        t[j] += slot[w];
        slot[w] = 0;
      }
    }
    fn(r, t);
  }
}

// xs = bf16(x / rms(x) * w), x read from L2 (other blocks wrote it).
__device__ void NormInput(const float* x, const float* w, int d, float eps, uint16_t* xs,
                          float* red) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  float ss = 0;
  for (int i = threadIdx.x; i < d / 4; i += kConsumers) {
    const float4 v = __ldcg(x4 + i);
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  ss = ConsumerSum(ss, red);
  const float inv = rsqrtf(ss / d + eps);
  uint2* out = reinterpret_cast<uint2*>(xs);
  for (int i = threadIdx.x; i < d / 4; i += kConsumers) {
    const float4 v = __ldcg(x4 + i), g = w4[i];
    out[i] = make_uint2(Pack2(v.x * inv * g.x, v.y * inv * g.y),
                        Pack2(v.z * inv * g.z, v.w * inv * g.w));
  }
  ConsumerSync();
}
// xs = src (n bf16, a multiple of 8), read from L2.
__device__ void CopyInput(const uint16_t* src, int n, uint16_t* xs) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(xs);
  for (int i = threadIdx.x; i < n / 8; i += kConsumers) d[i] = __ldcg(s + i);
  ConsumerSync();
}

// ---- attention of one KV head's key range ----

// A lane's HD / 32 elements of a cached K or V row, as floats.
template <int HD, bool F8>
__device__ __forceinline__ void LoadKv(const void* cache, int64_t at, float* f) {
  constexpr int DL = HD / 32;
  if constexpr (F8) {
    const uint8_t* c = static_cast<const uint8_t*>(cache) + at;
    if constexpr (DL == 4) {
      const uint32_t v = __ldcg(reinterpret_cast<const unsigned int*>(c));
      const float2 lo = Fp8x2ToFloat2(static_cast<uint16_t>(v & 0xffffu));
      const float2 hi = Fp8x2ToFloat2(static_cast<uint16_t>(v >> 16));
      f[0] = lo.x, f[1] = lo.y, f[2] = hi.x, f[3] = hi.y;
    } else {
      const float2 v = Fp8x2ToFloat2(__ldcg(reinterpret_cast<const unsigned short*>(c)));
      f[0] = v.x, f[1] = v.y;
    }
  } else {
    const uint16_t* c = static_cast<const uint16_t*>(cache) + at;
    if constexpr (DL == 4) {
      const uint2 v = __ldcg(reinterpret_cast<const uint2*>(c));
      f[0] = __uint_as_float(v.x << 16), f[1] = __uint_as_float(v.x & 0xffff0000u);
      f[2] = __uint_as_float(v.y << 16), f[3] = __uint_as_float(v.y & 0xffff0000u);
    } else {
      const uint32_t v = __ldcg(reinterpret_cast<const unsigned int*>(c));
      f[0] = __uint_as_float(v << 16), f[1] = __uint_as_float(v & 0xffff0000u);
    }
  }
}

// Block (g, s) of a layer's attention: KV head g's key range s of `used`.
// Rotates the group's queries (and, for the last range, the token's K,
// stored with V), attends on CUDA cores (each warp every eighth key, an
// online softmax per query head in log2 units), meets its warps in shared
// memory and writes the group's output (one range) or its range to
// `partial`, where the last range to finish merges them.
template <int HD, bool F8>
__device__ void AttendRange(const DecodeLayersArgs& a, const DecodeLayer& L, int layer, int* cnt,
                            int g, int s, float* scr, int* flag) {
  constexpr int DL = HD / 32;
  constexpr int kKeysInFlight = 16 / DL;  // keys each warp loads before using the first
  const int grp = a.n_head / a.n_kv, q_dim = a.n_head * HD, kv_dim = a.n_kv * HD;
  const int t = a.tokens[0], pos = a.pos[t], keys = pos + 1;
  const int used =
      min(kDecodeLayersRanges,
          max(1, min(keys / max(1, a.range_keys), static_cast<int>(gridDim.x) / a.n_kv)));
  if (s >= used) return;
  const int k0 = static_cast<int>(static_cast<int64_t>(keys) * s / used);
  const int k1 = static_cast<int>(static_cast<int64_t>(keys) * (s + 1) / used);
  RopeKvArgs rk;
  rk.pos = a.pos + t;
  rk.slot = a.slot + t;
  rk.inv_freq = a.inv_freq;
  rk.k_cache = L.k_cache;
  rk.v_cache = L.v_cache;
  rk.cache = a.cache;
  rk.n = 1, rk.n_head = a.n_head, rk.n_kv = a.n_kv, rk.head_dim = HD, rk.n_rot = a.n_rot;
  rk.block_size = a.block_size;
  rk.neox = a.neox;
  float* qs = scr;                // [grp][HD] rotated queries
  float* wpart = scr + grp * HD;  // [warp][grp][HD + 2]: each warp's (output, max, sum)
  const int q0 = g * grp * HD;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t* table = a.tables + a.seq_table[a.tok_seq[t]];
  // Each warp takes every eighth key from k0 + warp, kKeysInFlight at a
  // time. Its first keys, but the token's own (stored below), are loaded
  // before the wait for Q/K/V: they were cached by earlier steps.
  float kf[kKeysInFlight][DL], vf[kKeysInFlight][DL];
  auto load = [&](int key, float* kr, float* vr) {
    const int64_t at =
        ((static_cast<int64_t>(table[key / a.block_size]) * a.n_kv + g) * a.block_size +
         key % a.block_size) *
            HD +
        lane * DL;
    LoadKv<HD, F8>(L.k_cache, at, kr);
    LoadKv<HD, F8>(L.v_cache, at, vr);
  };
  const int base0 = k0 + warp;
#pragma unroll
  for (int u = 0; u < kKeysInFlight; ++u) {
    const int key = base0 + u * kConsumerWarps;
    if (key < k1 && key != pos) load(key, kf[u], vf[u]);
  }
  WaitCount(cnt + kQkvDone, static_cast<int>(gridDim.x), false);
  Mark(a, layer, 4);
  for (int p = threadIdx.x; p < grp * HD / 2; p += kConsumers) {
    const int ra = RopeRow(rk, q0 + 2 * p), rc = RopeRow(rk, q0 + 2 * p + 1);
    float x0 = __ldcg(a.qkv + ra), x1 = __ldcg(a.qkv + rc);
    const int d = ra % HD;
    if (a.neox ? d < a.n_rot / 2 : d < a.n_rot)
      RotatePair(x0, x1, a.inv_freq[a.neox ? d : d / 2], pos, &x0, &x1);
    qs[ra - q0] = x0;
    qs[rc - q0] = x1;
  }
  if (s == used - 1) {  // the token's own K and V, which this range attends last
    for (int p = threadIdx.x; p < HD; p += kConsumers) {
      const int r = 2 * p < HD ? q_dim + g * HD + 2 * p : q_dim + kv_dim + g * HD + 2 * p - HD;
      const int ra = RopeRow(rk, r), rc = RopeRow(rk, r + 1);
      RopeStorePair(rk, 0, ra, rc, __ldcg(a.qkv + ra), __ldcg(a.qkv + rc));
    }
  }
  ConsumerSync();
#pragma unroll
  for (int u = 0; u < kKeysInFlight; ++u)
    if (base0 + u * kConsumerWarps == pos && pos < k1) load(pos, kf[u], vf[u]);
  constexpr int G8 = 8;  // most query heads per KV head
  float q[G8][DL], o[G8][DL], m[G8], l[G8];
  const float qscale = a.scale * kLog2e;
#pragma unroll
  for (int h = 0; h < G8; ++h) {
    m[h] = -FLT_MAX, l[h] = 0;
#pragma unroll
    for (int i = 0; i < DL; ++i) {
      q[h][i] = h < grp ? qs[h * HD + lane * DL + i] * qscale : 0.0f;
      o[h][i] = 0;
    }
  }
  for (int base = base0; base < k1; base += kConsumerWarps * kKeysInFlight) {
    if (base != base0) {
#pragma unroll
      for (int u = 0; u < kKeysInFlight; ++u)
        if (base + u * kConsumerWarps < k1) load(base + u * kConsumerWarps, kf[u], vf[u]);
    }
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u) {
      if (base + u * kConsumerWarps >= k1) break;
#pragma unroll
      for (int h = 0; h < G8; ++h) {
        if (h >= grp) break;
        float sc = 0;
#pragma unroll
        for (int i = 0; i < DL; ++i) sc += q[h][i] * kf[u][i];
        sc = WarpSum(sc);
        const float mn = fmaxf(m[h], sc), corr = exp2f(m[h] - mn), p = exp2f(sc - mn);
        l[h] = l[h] * corr + p;
#pragma unroll
        for (int i = 0; i < DL; ++i) o[h][i] = o[h][i] * corr + p * vf[u][i];
        m[h] = mn;
      }
    }
  }
#pragma unroll
  for (int h = 0; h < G8; ++h) {
    if (h >= grp) break;
    float* wp = wpart + (warp * grp + h) * (HD + 2);
#pragma unroll
    for (int i = 0; i < DL; ++i) wp[lane * DL + i] = o[h][i];
    if (lane == 0) wp[HD] = m[h], wp[HD + 1] = l[h];
  }
  ConsumerSync();
  Mark(a, layer, 5);
  // The warps met: (output, max, sum) of this range per query head.
  const int stride = kDecodeLayersRanges * grp * (HD + 2);
  float* part = a.partial + static_cast<int64_t>(g) * stride;
  for (int e = threadIdx.x; e < grp * HD; e += kConsumers) {
    const int h = e / HD, d = e % HD;
    float mx = -FLT_MAX;
    for (int w = 0; w < kConsumerWarps; ++w)
      if (wpart[(w * grp + h) * (HD + 2) + HD + 1] > 0)
        mx = fmaxf(mx, wpart[(w * grp + h) * (HD + 2) + HD]);
    float sum = 0, out = 0;
    for (int w = 0; w < kConsumerWarps; ++w) {
      const float* wp = wpart + (w * grp + h) * (HD + 2);
      if (wp[HD + 1] > 0) {
        const float f = exp2f(wp[HD] - mx);
        sum += wp[HD + 1] * f;
        out += wp[d] * f;
      }
    }
    if (used == 1) {
      a.att[q0 + e] = ToBf(out / sum);
    } else {
      float* pr = part + (s * grp + h) * (HD + 2);
      pr[d] = out;
      if (d == 0) pr[HD] = mx, pr[HD + 1] = sum;
    }
  }
  if (used == 1) {
    Signal(cnt + kAttDone);
    return;
  }
  ConsumerSync();
  if (threadIdx.x == 0) {
    __threadfence();
    *flag = atomicAdd(cnt + kRanges + g, 1) == used - 1;
    __threadfence();
  }
  ConsumerSync();
  if (!*flag) return;
  // The last range of this KV head: merge them all.
  for (int e = threadIdx.x; e < grp * HD; e += kConsumers) {
    const int h = e / HD, d = e % HD;
    float mx = -FLT_MAX;
    for (int r = 0; r < used; ++r) mx = fmaxf(mx, __ldcg(part + (r * grp + h) * (HD + 2) + HD));
    float sum = 0, out = 0;
    for (int r = 0; r < used; ++r) {
      const float* pr = part + (r * grp + h) * (HD + 2);
      const float f = exp2f(__ldcg(pr + HD) - mx);
      sum += __ldcg(pr + HD + 1) * f;
      out += __ldcg(pr + d) * f;
    }
    a.att[q0 + e] = ToBf(out / sum);
  }
  Signal(cnt + kAttDone);
}

template <int HD, bool F8>
__global__ void __launch_bounds__(kThreads, 1) DecodeLayersKernel(DecodeLayersArgs a, Plan pl) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float red[kConsumerWarps];
  __shared__ int flag;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kMaxStages;
  float* acc = reinterpret_cast<float*>(smem + pl.acc_off);
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem + pl.scr_off);
  float* scr = reinterpret_cast<float*>(smem + pl.scr_off);
  uint8_t* ring = smem + pl.ring_off;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < pl.stages; ++s) {
      MbarInit(&full[s], 1);
      MbarInit(&empty[s], kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  for (int i = threadIdx.x; i < pl.max_rows * kConsumerWarps; i += kThreads) acc[i] = 0;
  __syncthreads();
  if (warp == kConsumerWarps) {
    if (lane == 0) Load(a, pl, ring, full, empty);
    return;
  }
  const int G = pl.blocks, b = blockIdx.x, per_layer = 5 + a.n_kv;
  const int q_dim = a.n_head * HD;
  RingPos rp;
  auto product = [&](const Share& s) {
    if (a.tensor_cores)
      Product(s, xs, acc, ring, full, empty, pl.stages, rp,
              [](const uint8_t* w, const uint16_t* x, int n) { return MmaRuns(w, x, n); });
    else
      Product(s, xs, acc, ring, full, empty, pl.stages, rp,
              [](const uint8_t* w, const uint16_t* x, int n) { return FmaRuns(w, x, n); });
  };
  for (int l = 0; l < a.n_layer; ++l) {
    const DecodeLayer L = a.layers[l];
    int* cnt = a.counters + l * per_layer;
    // Q/K/V, after the last layer's down rows.
    Mark(a, l, 0);
    if (l > 0) WaitCount(cnt - per_layer + kDownDone, G, a.no_waits);
    Mark(a, l, 1);
    NormInput(a.x, L.attn_norm, a.d, a.eps, xs, red);
    Mark(a, l, 2);
    Share s = PhaseShare(a, pl, L, 0);
    product(s);
    RowSums(s, acc, 1, [&](int r, const float* t) { a.qkv[s.row0 + r] = t[0]; });
    Signal(cnt + kQkvDone);
    Mark(a, l, 3);
    // Attention, in the first n_kv * n_split blocks (marks 4 and 5 are
    // written again by those that attend).
    Mark(a, l, 4);
    Mark(a, l, 5);
    if (b < a.n_kv * pl.n_split && !a.no_waits)
      AttendRange<HD, F8>(a, L, l, cnt, b / pl.n_split, b % pl.n_split, scr, &flag);
    Mark(a, l, 6);
    // Wo, into the residual.
    WaitCount(cnt + kAttDone, a.n_kv, a.no_waits);
    Mark(a, l, 7);
    CopyInput(a.att, q_dim, xs);
    s = PhaseShare(a, pl, L, 1);
    product(s);
    RowSums(s, acc, 1, [&](int r, const float* t) {
      float* x = a.x + s.row0 + r;
      *x = __ldcg(x) + t[0];
    });
    Signal(cnt + kWoDone);
    Mark(a, l, 8);
    // Gate/up and the gate.
    WaitCount(cnt + kWoDone, G, a.no_waits);
    Mark(a, l, 9);
    NormInput(a.x, L.ffn_norm, a.d, a.eps, xs, red);
    s = PhaseShare(a, pl, L, 2);
    product(s);
    RowSums(s, acc, 2, [&](int r, const float* t) {
      a.act[(s.row0 + r) / 2] = ToBf(GateOf(a.gate, t[0]) * t[1]);
    });
    Signal(cnt + kGuDone);
    Mark(a, l, 10);
    // Down, into the residual.
    WaitCount(cnt + kGuDone, G, a.no_waits);
    Mark(a, l, 11);
    CopyInput(a.act, a.n_ff, xs);
    s = PhaseShare(a, pl, L, 3);
    product(s);
    RowSums(s, acc, 1, [&](int r, const float* t) {
      float* x = a.x + s.row0 + r;
      *x = __ldcg(x) + t[0];
    });
    Signal(cnt + kDownDone);
    Mark(a, l, 12);
  }
  // The last block out sets every counter back to zero.
  ConsumerSync();
  if (threadIdx.x == 0) {
    const int n = a.n_layer * per_layer + 1;  // DecodeLayersCounters
    __threadfence();
    if (atomicAdd(a.counters + n - 1, 1) == G - 1) {
      for (int i = 0; i < n; ++i) a.counters[i] = 0;
      __threadfence();
    }
  }
}

struct Device {
  int sms = 0, smem_optin = 0;
};
Device DeviceInfo() {
  static std::atomic<int> cached[64][2] = {};
  int dev = 0;
  cudaGetDevice(&dev);
  Device d;
  if (dev < 64 && cached[dev][0].load() > 0) {
    d.sms = cached[dev][0].load();
    d.smem_optin = cached[dev][1].load();
    return d;
  }
  cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (dev < 64) {
    cached[dev][1] = d.smem_optin;
    cached[dev][0] = d.sms;
  }
  return d;
}

int Round128(int n) { return (n + 127) / 128 * 128; }

// The plan for a shape on this device; stages 0 when it does not fit.
Plan PlanFor(int d, int n_head, int n_kv, int head_dim, int n_ff) {
  const Device dev = DeviceInfo();
  Plan p;
  p.blocks = dev.sms;
  const int q_dim = n_head * head_dim, grp = n_head / n_kv;
  p.pieces_d = PiecesOf(d);
  p.pieces_q = PiecesOf(q_dim);
  p.pieces_f = PiecesOf(n_ff);
  p.n_split = std::min(kDecodeLayersRanges, std::max(1, p.blocks / n_kv));
  auto most = [&](int rows, int unit) { return (rows / unit + p.blocks - 1) / p.blocks * unit; };
  p.max_rows = std::max({most(q_dim + 2 * n_kv * head_dim, 1), most(d, 1), most(2 * n_ff, 2)});
  p.acc_off = kBarBytes;
  const int input = 2 * std::max({d, q_dim, n_ff});
  const int attention = 4 * (grp * head_dim + kConsumerWarps * grp * (head_dim + 2));
  p.scr_off = p.acc_off + Round128(4 * p.max_rows * kConsumerWarps);
  p.ring_off = p.scr_off + Round128(std::max(input, attention));
  const int statics = 256;  // the kernel's own __shared__ words, with room
  p.stages = std::min(kMaxStages, (dev.smem_optin - statics - p.ring_off) / kChunk);
  if (p.stages < 2) p.stages = 0;
  p.smem = p.ring_off + p.stages * kChunk;
  return p;
}

template <int HD, bool F8>
int LaunchLayers(const DecodeLayersArgs& a, const Plan& p, cudaStream_t s) {
  static std::atomic<int> configured[64] = {};
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev < 64 && configured[dev].load() < p.smem) {
    const cudaError_t e = cudaFuncSetAttribute(DecodeLayersKernel<HD, F8>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem);
    if (e != cudaSuccess) return static_cast<int>(e);
    configured[dev] = p.smem;
  }
  // Every block must be resident at once: they wait for one another.
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  return LaunchWith(attr, DecodeLayersKernel<HD, F8>, dim3(p.blocks), dim3(kThreads),
                    static_cast<size_t>(p.smem), s, a, p);
}

}  // namespace

const char* DecodeLayersRefusal(int d, int n_head, int n_kv, int head_dim, int n_rot, int n_ff) {
  if (head_dim != 64 && head_dim != 128) return "head_dim is not 64 or 128";
  if (n_kv <= 0 || n_head % n_kv != 0 || n_head / n_kv > 8)
    return "more than 8 query heads per KV head";
  if (d % 256 != 0 || (n_head * head_dim) % 256 != 0 || n_ff % 256 != 0)
    return "a dimension is not a multiple of 256";
  if (n_rot % 2 != 0 || n_rot > head_dim) return "the rotated dimensions";
  if (!PiecesOf(d) || !PiecesOf(n_head * head_dim) || !PiecesOf(n_ff))
    return "a row does not split into stages";
  if (PlanFor(d, n_head, n_kv, head_dim, n_ff).stages == 0) return "too little shared memory";
  return "";
}

int DecodeLayers(const DecodeLayersArgs& a, void* stream) {
  if (*DecodeLayersRefusal(a.d, a.n_head, a.n_kv, a.head_dim, a.n_rot, a.n_ff) != '\0') return -1;
  Plan p = PlanFor(a.d, a.n_head, a.n_kv, a.head_dim, a.n_ff);
  if (a.stages > 0 && a.stages < p.stages) {
    p.stages = std::max(2, a.stages);
    p.smem = p.ring_off + p.stages * kChunk;
  }
  const bool f8 = a.cache == KvCache::kE4m3;
  if (a.head_dim == 64)
    return f8 ? LaunchLayers<64, true>(a, p, S(stream)) : LaunchLayers<64, false>(a, p, S(stream));
  return f8 ? LaunchLayers<128, true>(a, p, S(stream)) : LaunchLayers<128, false>(a, p, S(stream));
}

}  // namespace braid::kernels::cuda
