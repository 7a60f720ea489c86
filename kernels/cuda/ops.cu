// The CUDA backend's kernels other than GEMMs (kernels/cuda_ops.h). fp32
// arithmetic throughout; bf16 only where values are stored for a GEMM or in
// the KV cache.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "device.cuh"
#include "kernels/cuda_ops.h"

namespace braid::kernels::cuda {
namespace {

using namespace dev;

// Sum over the block (blockDim.x a multiple of 32, at most 1024).
__device__ float BlockSum(float v) {
  __shared__ float part[32];
  __shared__ float total;
  v = WarpSum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    float w = lane < warps ? part[lane] : 0.0f;
    w = WarpSum(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

__global__ void EmbedKernel(const uint16_t* table, const int32_t* ids, int dim, float scale,
                            float* x) {
  Release();
  Acquire();
  const int t = blockIdx.x;
  const uint16_t* row = table + static_cast<int64_t>(ids[t]) * dim;
  float* out = x + static_cast<int64_t>(t) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[i] = Bf(row[i]) * scale;
}

__global__ void RmsNormKernel(const float* x, const float* w, const int32_t* rows, int dim,
                              float eps, uint16_t* out) {
  Release();
  Acquire();
  const int r = blockIdx.x;
  const int src = rows ? rows[r] : r;
  const float* in = x + static_cast<int64_t>(src) * dim;
  uint16_t* o = out + static_cast<int64_t>(r) * dim;
  float ss = 0;
  if (dim % 4 == 0) {  // rows of 16-byte pieces: four values a load, the bf16s stored as 8 bytes
    const float4* in4 = reinterpret_cast<const float4*>(in);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const int n4 = dim / 4;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
      const float4 v = in4[i];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = BlockSum(ss);
    const float inv = rsqrtf(ss / dim + eps);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
      const float4 v = in4[i], g = w4[i];
      uint2 packed;
      packed.x = ToBf(v.x * inv * g.x) | static_cast<uint32_t>(ToBf(v.y * inv * g.y)) << 16;
      packed.y = ToBf(v.z * inv * g.z) | static_cast<uint32_t>(ToBf(v.w * inv * g.w)) << 16;
      reinterpret_cast<uint2*>(o)[i] = packed;
    }
    return;
  }
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += in[i] * in[i];
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / dim + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = ToBf(in[i] * inv * w[i]);
}

// x[r, :] += y[r, :] / rms(y[r, :]) * w.
__global__ void RmsNormAddKernel(const float* y, const float* w, int dim, float eps, float* x) {
  Release();
  Acquire();
  const int64_t r = blockIdx.x;
  const float* in = y + r * dim;
  float ss = 0;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += in[i] * in[i];
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / dim + eps);
  float* o = x + r * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] += in[i] * inv * w[i];
}

// One warp per head of a token's Q, K and V (blockIdx.x the token): the
// bias added, then Q's and K's heads normalized.
__global__ void QkNormKernel(float* qkv, const float* bias, const float* q_norm,
                             const float* k_norm, int n_head, int n_kv, int hd, float eps) {
  Release();
  Acquire();
  const int heads = n_head + 2 * n_kv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int width = heads * hd;
  float* row = qkv + static_cast<int64_t>(blockIdx.x) * width;
  for (int h = blockIdx.y * (blockDim.x / 32) + warp; h < heads;
       h += gridDim.y * (blockDim.x / 32)) {
    float* x = row + h * hd;
    const float* b = bias ? bias + h * hd : nullptr;
    const float* w = h < n_head ? q_norm : h < n_head + n_kv ? k_norm : nullptr;
    float ss = 0;
    for (int d = lane; d < hd; d += 32) {
      const float v = x[d] + (b ? b[d] : 0.0f);
      ss += v * v;
      if (!w) x[d] = v;
    }
    if (!w) continue;
    const float inv = rsqrtf(WarpSum(ss) / hd + eps);
    for (int d = lane; d < hd; d += 32) x[d] = (x[d] + (b ? b[d] : 0.0f)) * inv * w[d];
  }
}

// One thread per pair of a token's Q, K and V that rotates together
// (RopeRow's pairs): the bias added, rotated, then Q written and K and V
// stored.
__global__ void RopeKvKernel(RopeKvArgs a) {
  Release();
  Acquire();
  const int t = blockIdx.x;
  const int width = (a.n_head + 2 * a.n_kv) * a.head_dim;
  const float* row = a.qkv + static_cast<int64_t>(t) * width;
  for (int p = blockIdx.y * blockDim.x + threadIdx.x; 2 * p < width; p += gridDim.y * blockDim.x) {
    const int ra = RopeRow(a, 2 * p), rc = RopeRow(a, 2 * p + 1);
    RopeStorePair(a, t, ra, rc, row[ra], row[rc]);
  }
}

__global__ void GatedActivationKernel(const float* gu, int n_ff, Gate gate, uint16_t* out) {
  Release();
  Acquire();
  const int t = blockIdx.y;
  const float* row = gu + static_cast<int64_t>(t) * 2 * n_ff;
  uint16_t* o = out + static_cast<int64_t>(t) * n_ff;
  if (n_ff % 2 == 0) {  // two pairs a thread: one 16-byte load, one 4-byte store
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * j >= n_ff) return;
    const float4 p = reinterpret_cast<const float4*>(row)[j];
    reinterpret_cast<uint32_t*>(o)[j] =
        ToBf(GateOf(gate, p.x) * p.y) | static_cast<uint32_t>(ToBf(GateOf(gate, p.z) * p.w)) << 16;
    return;
  }
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n_ff) return;
  const float2 gate_up = reinterpret_cast<const float2*>(row)[j];
  o[j] = ToBf(GateOf(gate, gate_up.x) * gate_up.y);
}

constexpr int kWarps = 4;

// The keys the token of decode attention block (blockIdx.x, ...) attends:
// [start, n_keys). A cascade member attends its keys from key_start on; the
// keys before were attended for its group, as ranges (a.prefix) to merge. A
// sliding window starts the keys later still. The token splits its keys
// into `ranges` of the grid's a.n_split, each of at least a.range_keys keys
// (a short context is not cut into ranges that cost more to merge than to
// attend); blocks of ranges past them have nothing to do.
struct DecodeKeys {
  int t, n_keys, start, ranges;
  bool has_prefix;
};
__device__ __forceinline__ DecodeKeys KeysOf(const DecodeAttentionArgs& a) {
  DecodeKeys k;
  k.t = a.tokens[blockIdx.x];
  k.n_keys = a.pos[k.t] + 1;
  const int ks0 = a.key_start ? a.key_start[k.t] : 0;
  k.has_prefix = ks0 > 0;
  k.start = a.window > 0 ? max(ks0, k.n_keys - a.window) : ks0;
  k.ranges = min(a.n_split, max(1, (k.n_keys - k.start) / max(1, a.range_keys)));
  return k;
}

// The end of a decode attention block of (token a.tokens[blockIdx.x], KV
// head blockIdx.y, range blockIdx.z of the token's n_ranges): NSUB partial
// results in shared memory (unnormalized outputs, maxima, sums per query
// head; a sum of 0 for none) merged into the range's result; with several
// ranges the last block of the (token, KV head) to finish merges them all,
// and the group's prefix ranges where there are some.
template <int HD, int GMAX, int NSUB>
__device__ void FinishDecode(const DecodeAttentionArgs& a, bool has_prefix, int n_ranges,
                             const float (*sm_acc)[GMAX][HD], const float (*sm_m)[GMAX],
                             const float (*sm_l)[GMAX]) {
  const int t = a.tokens[blockIdx.x];
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int G = a.n_head / a.n_kv;
  const int q_dim = a.n_head * HD;
  __syncthreads();
  const int64_t out_row = static_cast<int64_t>(t) * q_dim;
  // This block's range of head (kvh, g), as (unnormalized output, max, sum)
  // with a range index; ranges of a head are laid out side by side.
  auto prefix_of = [&](int g, int p) {
    return a.prefix +
           ((static_cast<int64_t>(blockIdx.x) * a.n_head + kvh * G + g) * a.prefix_ranges + p) *
               (HD + 2);
  };
  auto partial_at = [&](int g, int s) {
    return a.partial +
           ((static_cast<int64_t>(blockIdx.x) * a.n_head + kvh * G + g) * a.n_split + s) * (HD + 2);
  };
  // Ranges n_ranges on, when there is a prefix, are the group's.
  auto part = [&](int g, int s) -> const float* {
    return s >= n_ranges ? prefix_of(g, s - n_ranges) : partial_at(g, s);
  };
  // One range: the group's prefix ranges merge here. Their maxima and sums
  // first, all loaded in one round; then each output a sum of independent loads.
  const bool merge_prefix = n_ranges == 1 && has_prefix;
  __shared__ float sm_pm[GMAX][kMaxPrefixRanges], sm_pl[GMAX][kMaxPrefixRanges];
  if (merge_prefix) {
    for (int e = threadIdx.x; e < G * a.prefix_ranges; e += blockDim.x) {
      const float* pp = prefix_of(e / a.prefix_ranges, e % a.prefix_ranges);
      const float l = pp[HD + 1];
      sm_pm[e / a.prefix_ranges][e % a.prefix_ranges] = l > 0 ? pp[HD] : -FLT_MAX;
      sm_pl[e / a.prefix_ranges][e % a.prefix_ranges] = l;
    }
    __syncthreads();
  }
  for (int e = threadIdx.x; e < G * HD; e += blockDim.x) {
    const int g = e / HD, d = e % HD;
    float mx = -FLT_MAX;
    for (int s = 0; s < NSUB; ++s) mx = fmaxf(mx, sm_m[s][g]);
    float sum = 0, o = 0;
    for (int s = 0; s < NSUB; ++s) {
      const float w = sm_l[s][g] > 0 ? __expf(sm_m[s][g] - mx) : 0.0f;
      sum += sm_l[s][g] * w;
      o += sm_acc[s][g][d] * w;
    }
    if (n_ranges == 1) {
      if (merge_prefix) {  // the group's ranges
        float mall = sum > 0 ? mx : -FLT_MAX;
        for (int r = 0; r < a.prefix_ranges; ++r) mall = fmaxf(mall, sm_pm[g][r]);
        const float w = sum > 0 ? __expf(mx - mall) : 0.0f;
        o *= w;
        sum *= w;
#pragma unroll 4
        for (int r = 0; r < a.prefix_ranges; ++r) {
          if (!(sm_pl[g][r] > 0)) continue;  // an empty range: its output is not read
          const float wp = __expf(sm_pm[g][r] - mall);
          o += prefix_of(g, r)[d] * wp;
          sum += sm_pl[g][r] * wp;
        }
      }
      a.out[out_row + (kvh * G + g) * HD + d] = ToBf(sum > 0 ? o / sum : 0.0f);
    } else {
      float* p = partial_at(g, split);
      p[d] = o;
      if (d == 0) {
        p[HD] = mx;
        p[HD + 1] = sum;
      }
    }
  }
  if (n_ranges == 1) return;
  // The last range of this (token, KV head) to finish merges them all.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  int* counter = a.counters + blockIdx.x * a.n_kv + kvh;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == n_ranges - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Weights of the ranges per head first (all loads in one round), then the
  // outputs, each a sum over ranges of independent loads.
  constexpr int kMaxRanges = 32 + kMaxPrefixRanges;
  const int ranges = n_ranges + (has_prefix ? a.prefix_ranges : 0);
  __shared__ float sm_w[GMAX][kMaxRanges], sm_rl[GMAX][kMaxRanges], sm_sum[GMAX];
  for (int e = threadIdx.x; e < G * ranges; e += blockDim.x) {
    const float* p = part(e / ranges, e % ranges);
    const float l = __ldcg(p + HD + 1);
    sm_w[e / ranges][e % ranges] = l > 0 ? __ldcg(p + HD) : -FLT_MAX;
    sm_rl[e / ranges][e % ranges] = l;
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float mx = -FLT_MAX, sum = 0;
    for (int s = 0; s < ranges; ++s) mx = fmaxf(mx, sm_w[g][s]);
    for (int s = 0; s < ranges; ++s) {
      const float l = sm_rl[g][s];
      const float w = l > 0 ? __expf(sm_w[g][s] - mx) : 0.0f;
      sm_w[g][s] = w;
      sum += l * w;
    }
    sm_sum[g] = sum;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * HD; e += blockDim.x) {
    const int g = e / HD, d = e % HD;
    float o = 0;
#pragma unroll 8
    for (int s = 0; s < ranges; ++s) o += sm_w[g][s] * __ldcg(part(g, s) + d);
    a.out[out_row + (kvh * G + g) * HD + d] = ToBf(sm_sum[g] > 0 ? o / sm_sum[g] : 0.0f);
  }
  if (threadIdx.x == 0) *counter = 0;
}

// Decode attention. Each thread block: one (token, KV head, key range); its
// 4 warps split into subgroups of kLanes = HD / 8 lanes, each lane holding 8
// dimensions, each subgroup one key at a time (keys interleaved between
// subgroups), with an online softmax per query head; the subgroups merge in
// shared memory, and with several ranges the last block of a (token, KV head)
// to finish merges the ranges.

// 8 elements of a K or V row as floats: 16 bytes of bf16, or (F8) 8 bytes
// of e4m3 in r.x, r.y.
template <bool F8>
__device__ __forceinline__ void KvToFloat(uint4 r, float* f) {
  if constexpr (F8) {
    const uint32_t w[2] = {r.x, r.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 lo = Fp8x2ToFloat2(static_cast<uint16_t>(w[i] & 0xffffu));
      const float2 hi = Fp8x2ToFloat2(static_cast<uint16_t>(w[i] >> 16));
      f[4 * i] = lo.x, f[4 * i + 1] = lo.y, f[4 * i + 2] = hi.x, f[4 * i + 3] = hi.y;
    }
  } else {
    Unpack(r, f);
  }
}

template <int HD, int GMAX, int U, bool F8>
__global__ void __launch_bounds__(kWarps * 32) DecodeAttentionKernel(DecodeAttentionArgs a) {
  Release();
  Acquire();
  constexpr int kLanes = HD / 8;                // lanes per key
  constexpr int kSub = kWarps * (32 / kLanes);  // subgroups per block
  __shared__ float sm_acc[kSub][GMAX][HD];
  __shared__ float sm_m[kSub][GMAX], sm_l[kSub][GMAX];

  const DecodeKeys keys = KeysOf(a);
  const int t = keys.t, n_keys = keys.n_keys, ks = keys.start;
  const bool has_prefix = keys.has_prefix;
  const int kvh = blockIdx.y, split = blockIdx.z;
  if (split >= keys.ranges) return;
  const int G = a.n_head / a.n_kv;
  const int chunk = (n_keys - ks + keys.ranges - 1) / keys.ranges;
  const int k0 = ks + split * chunk, k1 = min(n_keys, k0 + chunk);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int sub = warp * (32 / kLanes) + lane / kLanes;
  const int li = lane % kLanes, d0 = li * 8;
  const int32_t* table = a.tables + a.seq_table[a.tok_seq[t]];
  const int64_t head_stride = static_cast<int64_t>(a.block_size) * HD;
  const int q_dim = a.n_head * HD;

  float q[GMAX][8], acc[GMAX][8], m[GMAX], l[GMAX];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    m[g] = -FLT_MAX;
    l[g] = 0;
    const int hb = (kvh * G + g) * HD;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      acc[g][i] = 0;
      q[g][i] = g < G ? a.q[static_cast<int64_t>(t) * q_dim + hb + d0 + i] * a.scale : 0.0f;
    }
  }
  // Every lane of a warp runs the same iterations (the shuffles need them
  // all); a subgroup past the end of the range loads nothing and keeps its
  // state. Each subgroup loads U keys (and values) before using the first,
  // so that U loads per lane are in flight.
  for (int kb = k0; kb < k1; kb += kSub * U) {
    uint4 kr[U], vr[U];
    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = kb + u * kSub + sub;
      valid[u] = k < k1;
      if (valid[u]) {
        const int64_t blk = table[k / a.block_size];
        const int64_t base = (blk * a.n_kv + kvh) * head_stride + (k % a.block_size) * HD + d0;
        if constexpr (F8) {
          const uint2 kk =
              *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(a.k_cache) + base);
          const uint2 vv =
              *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(a.v_cache) + base);
          kr[u] = make_uint4(kk.x, kk.y, 0, 0);
          vr[u] = make_uint4(vv.x, vv.y, 0, 0);
        } else {
          kr[u] = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.k_cache) + base);
          vr[u] = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.v_cache) + base);
        }
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8], vf[8];
      KvToFloat<F8>(kr[u], kf);
      KvToFloat<F8>(vr[u], vf);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g >= G) break;
        float s = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) s += q[g][i] * kf[i];
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (!valid[u]) continue;
        const float mn = fmaxf(m[g], s);
        const float alpha = __expf(m[g] - mn), p = __expf(s - mn);
        l[g] = l[g] * alpha + p;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = acc[g][i] * alpha + p * vf[i];
        m[g] = mn;
      }
    }
  }
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (g >= G) break;
#pragma unroll
    for (int i = 0; i < 8; ++i) sm_acc[sub][g][d0 + i] = acc[g][i];
    if (li == 0) {
      sm_m[sub][g] = m[g];
      sm_l[sub][g] = l[g];
    }
  }
  FinishDecode<HD, GMAX, kSub>(a, has_prefix, keys.ranges, sm_acc, sm_m, sm_l);
}

// D = A B + C on tensor cores (mma m16n8k16, bf16 in, fp32 out) for the
// top 8 rows of A only: a0/a2 are this lane's pairs of row lane / 4 (k
// pairs 2 (lane % 4) and + 8), the bottom rows zero; c the lane's two
// outputs of row lane / 4 (columns 2 (lane % 4), + 1).
// H: fp16 operands instead (an e4m3 cache's keys and values, read as fp16).
template <bool H = false>
__device__ __forceinline__ void MmaTop(float (&c)[2], uint32_t a0, uint32_t a2, uint32_t b0,
                                       uint32_t b1) {
  [[maybe_unused]] float d2, d3;
  if constexpr (H) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%10,%10};"
        : "+f"(c[0]), "+f"(c[1]), "=f"(d2), "=f"(d3)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1), "f"(0.0f));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%10,%10};"
        : "+f"(c[0]), "+f"(c[1]), "=f"(d2), "=f"(d3)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1), "f"(0.0f));
  }
}

// Four 8x8 bf16 matrices from shared memory, lanes 8i..8i+7 giving the rows
// of matrix i; trans: each lane gets a column pair instead of a row pair.
template <bool kTrans>
__device__ __forceinline__ void LdMatrix4(uint32_t (&r)[4], const void* row) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  }
}

// 16 bytes from global to shared memory without registers; zeros when !in.
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, bool in) {
  const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(at), "l"(src),
               "r"(in ? 16 : 0));
}
__device__ __forceinline__ void CopyCommit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void CopyWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// bf16 (H: fp16) high part and remainder of (x0, x1), x0 in the low halves.
template <bool H = false>
__device__ __forceinline__ void SplitPair(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  if constexpr (H) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const float2 back = __half22float2(h);
    const __half2 l = __floats2half2_rn(x0 - back.x, x1 - back.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
  } else {
    hi = Pack2(x0, x1);
    lo = Pack2(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
  }
}

// An e4m3 tile of `rows` rows of HD bytes (row r at r * HD, unswizzled)
// into fp16 rows as ldmatrix reads them: 16-byte chunk c of row r at
// c ^ (r % 8); by `threads` threads, this one `tid`. A thread's two stores
// go to chunks 2ch and 2ch + 1, in an order that keeps 8 neighbouring
// threads' stores in distinct banks.
template <int HD>
__device__ __forceinline__ void Fp8TileToHalf(const uint8_t* src, uint16_t* dst, int rows, int tid,
                                              int threads) {
  constexpr int CH = HD / 16;  // e4m3 chunks per row
  for (int c = tid; c < rows * CH; c += threads) {
    const int r = c / CH, ch = c % CH;
    const uint4 raw = *reinterpret_cast<const uint4*>(src + r * HD + ch * 16);
    const uint4 lo = make_uint4(Fp8x2ToHalf2(raw.x & 0xffffu), Fp8x2ToHalf2(raw.x >> 16),
                                Fp8x2ToHalf2(raw.y & 0xffffu), Fp8x2ToHalf2(raw.y >> 16));
    const uint4 hi = make_uint4(Fp8x2ToHalf2(raw.z & 0xffffu), Fp8x2ToHalf2(raw.z >> 16),
                                Fp8x2ToHalf2(raw.w & 0xffffu), Fp8x2ToHalf2(raw.w >> 16));
    uint16_t* row = dst + r * HD;
    const bool hi_first = ch >= CH / 2;
    *reinterpret_cast<uint4*>(row + (((2 * ch + hi_first) ^ (r % 8)) * 8)) = hi_first ? hi : lo;
    *reinterpret_cast<uint4*>(row + (((2 * ch + !hi_first) ^ (r % 8)) * 8)) = hi_first ? lo : hi;
  }
}

// Decode attention on tensor cores. Each thread block: one (token, KV head,
// key range), the range a run of 16-key tiles (a tile lies in one KV block:
// block_size a multiple of 16), dealt to the 4 warps in turn. Each warp
// streams its tiles through ST buffers of its own in shared memory
// (cp.async, keys and values outside the token's range zero-filled), so
// that its next tiles are in flight while it computes one, and keeps its own
// online softmax. Per tile: S = Q K^T (the KV head's query heads as A's
// rows, at most 8; the 16 keys two n-tiles; K's fragments by ldmatrix), then
// O += P V (V's by ldmatrix.trans). Q (fp32 in memory) and P enter as a bf16
// high part and a bf16 remainder, two products each, so that scores and
// weights keep about fp32's precision against the bf16 cache. Rows of 16-byte
// chunks are stored with chunk c of row r at c ^ (r % 8): the 8 rows an
// ldmatrix reads fall in distinct banks. ST is 3 (kAttnStages) with either
// cache: four stages of an e4m3 cache's half-size tiles, in the same shared
// memory, were measured no faster (docs/benchmarks.md).

// A warp's shared memory: ST stages (keys and values of a tile, as cached)
// and, with an e4m3 cache (F8), the tile in use as fp16.
template <int HD, bool F8, int ST>
__host__ __device__ constexpr int AttnStageBytes() {
  return ST * 2 * 16 * HD * (F8 ? 1 : 2);
}
template <int HD, bool F8, int ST>
__host__ __device__ constexpr int AttnWarpBytes() {
  return AttnStageBytes<HD, F8, ST>() + (F8 ? 2 * 16 * HD * 2 : 0);
}
template <int HD, bool F8, int ST>
__host__ __device__ constexpr int AttnSmem() {
  return kWarps * AttnWarpBytes<HD, F8, ST>();
}

template <int HD, bool F8, int ST>
__global__ void __launch_bounds__(kWarps * 32) DecodeAttentionMmaKernel(DecodeAttentionArgs a) {
  extern __shared__ __align__(16) uint8_t attn_smem[];
  Release();
  constexpr int GMAX = 8, kTile = 16;
  constexpr int EB = F8 ? 1 : 2;          // bytes of a cached element
  constexpr int CH = HD * EB / 16;        // 16-byte chunks per key row, as cached
  constexpr int KS = HD / 16;             // k-steps of Q K^T
  constexpr int NT = HD / 8;              // n-tiles of P V
  constexpr int kTileElems = kTile * HD;  // one tile's keys (or values)
  __shared__ float sm_m[kWarps][GMAX], sm_l[kWarps][GMAX];

  const DecodeKeys keys = KeysOf(a);
  const int t = keys.t, n_keys = keys.n_keys, ks = keys.start;
  const bool has_prefix = keys.has_prefix;
  const int kvh = blockIdx.y, split = blockIdx.z;
  if (split >= keys.ranges) return;
  const int G = a.n_head / a.n_kv;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int gr = lane / 4, tq = lane % 4;
  const int32_t* table = a.tables + a.seq_table[a.tok_seq[t]];
  const int64_t head_stride = static_cast<int64_t>(a.block_size) * HD;
  uint8_t* stage_k = attn_smem + warp * AttnWarpBytes<HD, F8, ST>();  // [stage][K, V][tile]
  uint16_t* tile_h = reinterpret_cast<uint16_t*>(stage_k + AttnStageBytes<HD, F8, ST>());  // F8
  const uint8_t* k_cache = static_cast<const uint8_t*>(a.k_cache);
  const uint8_t* v_cache = static_cast<const uint8_t*>(a.v_cache);

  // This warp's tiles: first + split * per + warp, every kWarps-th after.
  const int first = ks / kTile, end = (n_keys + kTile - 1) / kTile;
  const int per = (end - first + keys.ranges - 1) / keys.ranges;
  const int t0 = first + split * per + warp, t1 = min(end, first + (split + 1) * per);
  const int mine = t0 < t1 ? (t1 - t0 + kWarps - 1) / kWarps : 0;
  // Keys before `earlier` were stored by earlier passes (DecodeAttentionArgs::
  // step_keys): the first tiles' rows of those go out before waiting for
  // the kernels ahead, the rest (this pass's own keys) after.
  const int earlier = a.step_keys > 0 ? n_keys - a.step_keys : INT_MIN;
  // The warp's i-th tile into stage i % ST: its rows of keys
  // before `earlier` (and the zero-filled ones) when part is 0, the others
  // when 1, all when 2; the group is committed after parts 1 and 2.
  auto issue = [&](int i, int part) {
    if (i < mine) {
      const int key0 = (t0 + i * kWarps) * kTile;
      const int64_t base =
          (static_cast<int64_t>(table[key0 / a.block_size]) * a.n_kv + kvh) * head_stride +
          (key0 % a.block_size) * HD;
      uint8_t* dk = stage_k + (i % ST) * 2 * kTileElems * EB;
#pragma unroll
      for (int u = 0; u < kTile * CH / 32; ++u) {
        const int c = lane + 32 * u, r = c / CH, ch = c % CH;
        const int key = key0 + r;
        const bool in = key >= ks && key < n_keys;
        if (part != 2 && (part == 0) != (!in || key < earlier)) continue;
        // bf16 rows swizzled as ldmatrix reads them; e4m3 rows as they
        // are, swizzled when converted.
        const int at = (r * HD + (F8 ? ch * 16 : (ch ^ (r % 8)) * 8)) * EB;
        const int64_t src = (base + r * HD) * EB + ch * 16;
        CopyAsync16(dk + at, k_cache + src, in);
        CopyAsync16(dk + kTileElems * EB + at, v_cache + src, in);
      }
    }
    if (part != 0) CopyCommit();  // an empty group past the last tile keeps the counts uniform
  };
#pragma unroll
  for (int i = 0; i < ST - 1; ++i) issue(i, 0);
  Acquire();
#pragma unroll
  for (int i = 0; i < ST - 1; ++i) issue(i, 1);

  // Q's A fragments in log2 units (row gr: query head kvh * G + gr; zero
  // rows past G), high parts and remainders.
  uint32_t qh[KS][2], ql[KS][2];
  {
    const float* q = a.q + static_cast<int64_t>(t) * a.n_head * HD + (kvh * G + gr) * HD;
    const float sc = a.scale * 1.4426950408889634f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int d = 16 * kk + 8 * h + 2 * tq;
        SplitPair<F8>(gr < G ? q[d] * sc : 0.0f, gr < G ? q[d + 1] * sc : 0.0f, qh[kk][h],
                      ql[kk][h]);
      }
  }
  float o[NT][2];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = 0;
  float m = -INFINITY, l = 0;  // l: this lane's share of its row's sum

  // ldmatrix rows this lane gives: matrix mi = lane / 8, row lane % 8.
  const int mi = lane / 8, mr = lane % 8;
  for (int i = 0; i < mine; ++i) {
    issue(i + ST - 1, 2);
    CopyWait<ST - 1>();
    __syncwarp();
    const uint8_t* stage = stage_k + (i % ST) * 2 * kTileElems * EB;
    const uint16_t* sk = reinterpret_cast<const uint16_t*>(stage);
    if constexpr (F8) {
      Fp8TileToHalf<HD>(stage, tile_h, 2 * kTile, lane, 32);  // keys, then values
      __syncwarp();
      sk = tile_h;
    }
    const uint16_t* sv = sk + kTileElems;
    const int key0 = (t0 + i * kWarps) * kTile;
    // S: keys 8n + 2tq + {0, 1} of row gr. K's matrices for k-step kk:
    // keys 0-7 and 8-15 (mi / 2), dims 16kk and 16kk + 8 (mi % 2).
    float sc[2][2] = {{0, 0}, {0, 0}};
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      const int r = mr + 8 * (mi / 2), ch = 2 * kk + mi % 2;
      uint32_t b[4];
      LdMatrix4<false>(b, sk + r * HD + (ch ^ (r % 8)) * 8);
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        MmaTop<F8>(sc[n], qh[kk][0], qh[kk][1], b[2 * n], b[2 * n + 1]);
        MmaTop<F8>(sc[n], ql[kk][0], ql[kk][1], b[2 * n], b[2 * n + 1]);
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int key = key0 + 8 * n + 2 * tq + c;
        if (key < ks || key >= n_keys) sc[n][c] = -INFINITY;
        mx = fmaxf(mx, sc[n][c]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m, mx);
    const float mu = mn == -INFINITY ? 0.0f : mn;  // no key yet: nothing to rescale
    const float alpha = exp2f(m - mu);
    float p[2][2];
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) p[n][c] = exp2f(sc[n][c] - mu);
    l = l * alpha + (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]);
    m = mn;
    uint32_t ph[2], pl[2];  // A fragments: keys 2tq + {0, 1} and 8 + 2tq + {0, 1}
#pragma unroll
    for (int n = 0; n < 2; ++n) SplitPair<F8>(p[n][0], p[n][1], ph[n], pl[n]);
      // V's matrices for n-tiles 2jj and 2jj + 1: keys 0-7 and 8-15 (mi % 2),
      // dims 16jj and 16jj + 8 (mi / 2).
#pragma unroll
    for (int jj = 0; jj < NT / 2; ++jj) {
      const int r = mr + 8 * (mi % 2), ch = 2 * jj + mi / 2;
      uint32_t b[4];
      LdMatrix4<true>(b, sv + r * HD + (ch ^ (r % 8)) * 8);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float(&on)[2] = o[2 * jj + h];
        on[0] *= alpha;
        on[1] *= alpha;
        MmaTop<F8>(on, ph[0], ph[1], b[2 * h], b[2 * h + 1]);
        MmaTop<F8>(on, pl[0], pl[1], b[2 * h], b[2 * h + 1]);
      }
    }
    __syncwarp();  // the stage (and the fp16 tile) is refilled by the next iteration
  }
  CopyWait<0>();
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  // The stages are free now: the warps' results go where they were.
  __syncthreads();
  auto sm_acc = reinterpret_cast<float(*)[GMAX][HD]>(attn_smem);
  if (gr < G) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      sm_acc[warp][gr][8 * n + 2 * tq] = o[n][0];
      sm_acc[warp][gr][8 * n + 2 * tq + 1] = o[n][1];
    }
    if (tq == 0) {
      sm_m[warp][gr] = l > 0 ? m * 0.6931471805599453f : -FLT_MAX;
      sm_l[warp][gr] = l;
    }
  }
  FinishDecode<HD, GMAX, kWarps>(a, has_prefix, keys.ranges, sm_acc, sm_m, sm_l);
}

// All 16 rows of A: a[0..3] are this lane's pairs of rows lane / 4 and + 8
// (k pairs 2 (lane % 4) and + 8, in mma's order); c its outputs of rows
// lane / 4 (c[0], c[1]) and + 8 (c[2], c[3]).
// H: fp16 operands.
template <bool H = false>
__device__ __forceinline__ void Mma16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                      uint32_t b1) {
  if constexpr (H) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Cascade attention on tensor cores: each thread block is one work unit
// (group, block of 64 query rows, key range) of one KV head. A group's query
// rows for the KV head are its members' query heads of that KV head (member
// i, head g at row i * G + g); each warp takes 16 of the block's rows as one
// full m16 tile. The block streams the range's keys of the group's prefix in
// tiles of KT = 64 keys through two shared buffers (cp.async, chunks
// swizzled by row as in the decode kernel; a tile may span KV blocks; keys
// past the prefix zero-filled and masked), each tile read once for all 64
// rows, and every warp runs S = Q K^T over the tile's keys, one
// online-softmax update, then O += P V, Q and P as bf16 high part plus
// remainder. Each row's range goes out unnormalized with its max and sum.
// (Measured against it on an H100: tiles of 16 keys in three buffers, 8
// warps a block, and bf16 products without the remainders:
// docs/benchmarks.md.)
constexpr int kCascadeKeys = 64, kCascadeWarps = 4, kCascadeStages = 2;
static_assert(kCascadeWarps * 16 == kCascadeBlockRows, "a warp takes 16 query rows");
// The stages as cached, and with an e4m3 cache (F8) the tile in use as fp16.
template <int HD, bool F8>
__host__ __device__ constexpr int CascadeStageBytes() {
  return kCascadeStages * 2 * kCascadeKeys * HD * (F8 ? 1 : 2);
}
template <int HD, bool F8>
__host__ __device__ constexpr int CascadeSmem() {
  return CascadeStageBytes<HD, F8>() + (F8 ? 2 * kCascadeKeys * HD * 2 : 0);
}

template <int HD, bool F8>
__global__ void __launch_bounds__(kCascadeWarps * 32)
    CascadeAttentionKernel(CascadeAttentionArgs a) {
  extern __shared__ __align__(16) uint8_t cascade_smem[];
  Release();
  if (!a.early_keys) Acquire();
  constexpr int KT = kCascadeKeys, W = kCascadeWarps, ST = kCascadeStages;
  constexpr int EB = F8 ? 1 : 2;  // bytes of a cached element
  constexpr int CH = HD * EB / 16, KS = HD / 16, NT = HD / 8, kTileElems = KT * HD;
  constexpr int SUB = KT / 16;   // 16-key steps of P V per tile
  constexpr int kRows = W * 16;  // query rows per block
  const int unit = a.work[blockIdx.x];
  if (unit < 0) return;  // idle: a graphed step's grid is fixed per batch size
  const int gi = unit >> 16, rb = (unit >> 4) & 0xfff, range = unit & 0xf;
  const int kvh = blockIdx.y;
  const int off = a.groups[4 * gi], m = a.groups[4 * gi + 1], keys = a.groups[4 * gi + 2];
  const int32_t* table = a.tables + a.seq_table[a.groups[4 * gi + 3]];
  const int G = a.n_head / a.n_kv, n_rows = m * G;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int gr = lane / 4, tq = lane % 4;
  const int64_t head_stride = static_cast<int64_t>(a.block_size) * HD;
  const uint8_t* k_cache = static_cast<const uint8_t*>(a.k_cache);
  const uint8_t* v_cache = static_cast<const uint8_t*>(a.v_cache);
  uint16_t* tile_h = reinterpret_cast<uint16_t*>(cascade_smem + CascadeStageBytes<HD, F8>());
  const int r0 = rb * kRows + 16 * warp;  // this warp's first row
  const bool active = r0 < n_rows;

  // The range's tiles: ranges split the prefix's 16-key tiles, and a range
  // is walked KT keys at a time.
  const int n16 = (keys + 15) / 16;
  const int per16 = (n16 + a.n_ranges - 1) / a.n_ranges;
  const int k_begin = min(keys, range * per16 * 16), k_end = min(keys, (range + 1) * per16 * 16);
  const int mine = (k_end - k_begin + KT - 1) / KT;
  auto issue = [&](int i) {  // keys k_begin + i * KT .. into stage i % ST
    if (i < mine) {
      const int key0 = k_begin + i * KT;
      uint8_t* dk = cascade_smem + (i % ST) * 2 * kTileElems * EB;
#pragma unroll
      for (int u = 0; u < KT * CH / (W * 32); ++u) {
        const int c = threadIdx.x + W * 32 * u, r = c / CH, ch = c % CH;
        const int key = key0 + r;
        const bool in = key < k_end;
        const int kk = in ? key : k_begin;  // an address inside the prefix either way
        const int64_t src =
            ((static_cast<int64_t>(table[kk / a.block_size]) * a.n_kv + kvh) * head_stride +
             (kk % a.block_size) * HD) *
                EB +
            ch * 16;
        // bf16 rows swizzled as ldmatrix reads them; e4m3 rows as they
        // are, swizzled when converted.
        const int at = (r * HD + (F8 ? ch * 16 : (ch ^ (r % 8)) * 8)) * EB;
        CopyAsync16(dk + at, k_cache + src, in);
        CopyAsync16(dk + kTileElems * EB + at, v_cache + src, in);
      }
    }
    CopyCommit();
  };
#pragma unroll
  for (int i = 0; i < ST - 1; ++i) issue(i);
  if (a.early_keys) Acquire();  // the prefix's first tiles are on their way

  // Q's A fragments in log2 units: rows r0 + gr (a[0], a[2]) and + 8 (a[1], a[3]).
  uint32_t qh[KS][4], ql[KS][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = r0 + gr + 8 * h;
    const float* q = row < n_rows
                         ? a.q + static_cast<int64_t>(a.rows[off + row / G]) * a.n_head * HD +
                               (kvh * G + row % G) * HD
                         : nullptr;
    const float sc = a.scale * 1.4426950408889634f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int d = 16 * kk + 8 * half + 2 * tq;
        SplitPair<F8>(q ? q[d] * sc : 0.0f, q ? q[d + 1] * sc : 0.0f, qh[kk][h + 2 * half],
                      ql[kk][h + 2 * half]);
      }
  }
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0, 0};  // rows gr, gr + 8

  const int mi = lane / 8, mr = lane % 8;
  for (int i = 0; i < mine; ++i) {
    issue(i + ST - 1);
    CopyWait<ST - 1>();
    __syncthreads();
    const uint8_t* stage = cascade_smem + (i % ST) * 2 * kTileElems * EB;
    const uint16_t* sk = reinterpret_cast<const uint16_t*>(stage);
    if constexpr (F8) {
      Fp8TileToHalf<HD>(stage, tile_h, 2 * KT, threadIdx.x, W * 32);  // keys, then values
      __syncthreads();
      sk = tile_h;
    }
    if (active) {
      const uint16_t* sv = sk + kTileElems;
      const int key0 = k_begin + i * KT;
      // S: n-tile n holds keys 8n + 2tq + {0, 1}; [0..1] row gr, [2..3] row gr + 8.
      float sc[2 * SUB][4];
#pragma unroll
      for (int n = 0; n < 2 * SUB; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0;
        // k-step by k-step, every accumulator's high product before any
        // remainder's: a product waits on its accumulator's previous one
        // 2 * SUB products back, not one.
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        uint32_t b[SUB][4];
#pragma unroll
        for (int j = 0; j < SUB; ++j) {
          const int r = 16 * j + mr + 8 * (mi / 2), ch = 2 * kk + mi % 2;
          LdMatrix4<false>(b[j], sk + r * HD + (ch ^ (r % 8)) * 8);
        }
#pragma unroll
        for (int j = 0; j < SUB; ++j)
#pragma unroll
          for (int n = 0; n < 2; ++n)
            Mma16<F8>(sc[2 * j + n], qh[kk], b[j][2 * n], b[j][2 * n + 1]);
#pragma unroll
        for (int j = 0; j < SUB; ++j)
#pragma unroll
          for (int n = 0; n < 2; ++n)
            Mma16<F8>(sc[2 * j + n], ql[kk], b[j][2 * n], b[j][2 * n + 1]);
      }
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 2 * SUB; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            if (key0 + 8 * n + 2 * tq + c >= k_end) sc[n][2 * h + c] = -INFINITY;
            mx = fmaxf(mx, sc[n][2 * h + c]);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(mrow[h], mx);  // finite: a tile holds at least one key
        alpha[h] = exp2f(mrow[h] - mn);
        float sum = 0;
#pragma unroll
        for (int n = 0; n < 2 * SUB; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c) sum += sc[n][2 * h + c] = exp2f(sc[n][2 * h + c] - mn);
        lrow[h] = lrow[h] * alpha[h] + sum;
        mrow[h] = mn;
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
      }
#pragma unroll
      for (int j = 0; j < SUB; ++j) {
        // P's A fragments for keys 16j..: rows gr / gr + 8, keys 2tq + {0, 1} / 8 + 2tq + {0, 1}.
        uint32_t ph[4], pl[4];
        SplitPair<F8>(sc[2 * j][0], sc[2 * j][1], ph[0], pl[0]);
        SplitPair<F8>(sc[2 * j][2], sc[2 * j][3], ph[1], pl[1]);
        SplitPair<F8>(sc[2 * j + 1][0], sc[2 * j + 1][1], ph[2], pl[2]);
        SplitPair<F8>(sc[2 * j + 1][2], sc[2 * j + 1][3], ph[3], pl[3]);
        // Half the output's n-tiles at a time: their high products, then
        // their remainders'.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          uint32_t b[NT / 4][4];
#pragma unroll
          for (int u = 0; u < NT / 4; ++u) {
            const int jj = half * NT / 4 + u;
            const int r = 16 * j + mr + 8 * (mi % 2), ch = 2 * jj + mi / 2;
            LdMatrix4<true>(b[u], sv + r * HD + (ch ^ (r % 8)) * 8);
          }
#pragma unroll
          for (int u = 0; u < NT / 4; ++u)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              Mma16<F8>(o[2 * (half * NT / 4 + u) + h], ph, b[u][2 * h], b[u][2 * h + 1]);
#pragma unroll
          for (int u = 0; u < NT / 4; ++u)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              Mma16<F8>(o[2 * (half * NT / 4 + u) + h], pl, b[u][2 * h], b[u][2 * h + 1]);
        }
      }
    }
    __syncthreads();  // the stage is refilled by the next iteration's issue
  }
  CopyWait<0>();
  if (!active) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = lrow[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = r0 + gr + 8 * h;
    if (row >= n_rows) continue;
    float* dst =
        a.prefix + ((static_cast<int64_t>(a.index[off + row / G]) * a.n_head + kvh * G + row % G) *
                        a.n_ranges +
                    range) *
                       (HD + 2);
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      dst[8 * n + 2 * tq] = o[n][2 * h];
      dst[8 * n + 2 * tq + 1] = o[n][2 * h + 1];
    }
    if (tq == 0) {
      dst[HD] = l > 0 ? mrow[h] * 0.6931471805599453f : -FLT_MAX;
      dst[HD + 1] = l;
    }
  }
}

// Lets `kernel` take `bytes` of dynamic shared memory on the current device
// (beyond 48 KB in all, the kernel's static part included, a launch needs
// the larger size allowed first; the allowance belongs to the device).
template <typename Kernel>
int AllowSmem(Kernel kernel, int bytes, int static_bytes, std::atomic<int> (&configured)[64]) {
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= 64) return static_cast<int>(cudaErrorInvalidDevice);
  if (bytes + static_bytes > 48 * 1024 && bytes > configured[device].load()) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) return static_cast<int>(e);
    configured[device].store(bytes);
  }
  return 0;
}

template <int HD, bool F8, int ST>
int LaunchDecodeMma(const DecodeAttentionArgs& a, cudaStream_t s) {
  static std::atomic<int> configured[64] = {};
  constexpr int smem = AttnSmem<HD, F8, ST>();
  static_assert(smem >= kWarps * 8 * HD * static_cast<int>(sizeof(float)), "sm_acc fits");
  if (const int e =
          AllowSmem(DecodeAttentionMmaKernel<HD, F8, ST>, smem, 2 * kWarps * 8 * 4, configured))
    return e;
  const dim3 grid(a.n, a.n_kv, a.n_split), block(kWarps * 32);
  return Launch(DecodeAttentionMmaKernel<HD, F8, ST>, grid, block, smem, s, a);
}
constexpr int kAttnStages = 3;
template <int HD>
int LaunchDecodeMma(const DecodeAttentionArgs& a, cudaStream_t s) {
  return a.cache == KvCache::kE4m3 ? LaunchDecodeMma<HD, true, kAttnStages>(a, s)
                                   : LaunchDecodeMma<HD, false, kAttnStages>(a, s);
}

template <int HD, int GMAX, bool F8>
int LaunchDecode(const DecodeAttentionArgs& a, cudaStream_t s) {
  const dim3 grid(a.n, a.n_kv, a.n_split), block(kWarps * 32);
  return a.keys_in_flight == 1
             ? Launch(DecodeAttentionKernel<HD, GMAX, 1, F8>, grid, block, 0, s, a)
             : Launch(DecodeAttentionKernel<HD, GMAX, 4, F8>, grid, block, 0, s, a);
}
template <int HD, int GMAX>
int LaunchDecode(const DecodeAttentionArgs& a, cudaStream_t s) {
  return a.cache == KvCache::kE4m3 ? LaunchDecode<HD, GMAX, true>(a, s)
                                   : LaunchDecode<HD, GMAX, false>(a, s);
}

template <bool F8>
__global__ void GatherKvKernel(const void* k_cache, const void* v_cache, const int32_t* table,
                               int key0, int n_keys, int n_kv, int hd, int bs, uint16_t* kc,
                               uint16_t* vc) {
  const int i = blockIdx.x, kvh = blockIdx.y, key = key0 + i;
  const int64_t blk = table[key / bs];
  const int64_t src = ((blk * n_kv + kvh) * bs + key % bs) * hd;
  const int64_t dst = (static_cast<int64_t>(kvh) * n_keys + i) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    if constexpr (F8) {  // e4m3 values are bf16 values: exact
      kc[dst + d] = ToBf(Fp8ToFloat(static_cast<const uint8_t*>(k_cache)[src + d]));
      vc[dst + d] = ToBf(Fp8ToFloat(static_cast<const uint8_t*>(v_cache)[src + d]));
    } else {
      kc[dst + d] = static_cast<const uint16_t*>(k_cache)[src + d];
      vc[dst + d] = static_cast<const uint16_t*>(v_cache)[src + d];
    }
  }
}

__global__ void GatherHeadsKernel(const float* q, int row0, int n, int n_head, int hd,
                                  uint16_t* qh) {
  const int t = blockIdx.x, h = blockIdx.y;
  const float* src = q + (static_cast<int64_t>(row0 + t) * n_head + h) * hd;
  uint16_t* dst = qh + (static_cast<int64_t>(h) * n + t) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = ToBf(src[d]);
}

__global__ void CausalSoftmaxKernel(const float* s, int n, int n_keys, int key0, int window,
                                    uint16_t* p) {
  const int64_t r = blockIdx.x;
  const int last = key0 + static_cast<int>(r % n);  // keys in [first, last] are visible
  const int first = window > 0 ? max(0, last - window + 1) : 0;
  const float* in = s + r * n_keys;
  uint16_t* out = p + r * n_keys;
  __shared__ float red[32];
  float mx = -FLT_MAX;
  for (int k = first + threadIdx.x; k <= last; k += blockDim.x) mx = fmaxf(mx, in[k]);
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = -FLT_MAX;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0;
  for (int k = first + threadIdx.x; k <= last; k += blockDim.x) sum += __expf(in[k] - mx);
  sum = BlockSum(sum);
  const float inv = 1.0f / sum;
  for (int k = threadIdx.x; k < n_keys; k += blockDim.x)
    out[k] = ToBf(k >= first && k <= last ? __expf(in[k] - mx) * inv : 0.0f);
}

__global__ void ScatterHeadsKernel(const uint16_t* oh, int row0, int n, int n_head, int hd,
                                   uint16_t* out) {
  const int t = blockIdx.x, h = blockIdx.y;
  const uint16_t* src = oh + (static_cast<int64_t>(h) * n + t) * hd;
  uint16_t* dst = out + (static_cast<int64_t>(row0 + t) * n_head + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = src[d];
}

__global__ void F32ToBf16Kernel(const float* src, int64_t n, uint16_t* dst) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = ToBf(src[i]);
}

// The largest of the block's values (every thread gets it).
__device__ float BlockMax(float v) {
  __shared__ float part[32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, o));
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

// The largest finite e4m3 value.
constexpr float kFp8Max = 448.0f;

__global__ void QuantizeRowsFp8Kernel(const uint16_t* w, int k, uint8_t* q, float* scale) {
  Release();
  Acquire();
  const int64_t r = blockIdx.x;
  const uint16_t* row = w + r * k;
  float mx = 0;
  for (int i = threadIdx.x; i < k; i += blockDim.x) mx = fmaxf(mx, fabsf(Bf(row[i])));
  mx = BlockMax(mx);
  const float s = mx > 0 ? mx / kFp8Max : 1.0f, inv = 1.0f / s;
  uint8_t* out = q + r * k;
  for (int i = threadIdx.x; i < k; i += blockDim.x)
    out[i] = __nv_cvt_float_to_fp8(Bf(row[i]) * inv, __NV_SATFINITE, __NV_E4M3);
  if (threadIdx.x == 0) scale[r] = s;
}

__global__ void DequantizeRowsFp8Kernel(const uint8_t* q, const float* scale, int64_t n, int k,
                                        uint16_t* w) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * k / 2) return;
  const float s = scale[(2 * i) / k];
  const float2 f = Fp8x2ToFloat2(reinterpret_cast<const uint16_t*>(q)[i]);
  w[2 * i] = ToBf(f.x * s);
  w[2 * i + 1] = ToBf(f.y * s);
}

// Gemv: 8 warps per block. The block takes 8 / S output rows at a time
// (rows strided over the grid), S warps to a row (GemvArgs::split), each
// warp a slice of k: every lane streams 16-byte pieces of its slice, U (4
// or 8) of them in flight, against the block's bf16 copy of x in shared
// memory, and the slices' sums meet in shared memory. Splitting rows lets
// a matrix with few rows for the grid's warps (6,144 rows on 4,224
// resident warps) give every warp the same share instead of a second,
// part-empty round. The first pieces of the warp's first row are loaded
// before waiting for the kernel that writes x. Rows go round in whole
// blocks, so every warp of a block runs the same number of rounds.
constexpr int kGemvWarps = 8;

// xs[m, :] = bf16(xf[m, :] / rms(xf[m, :]) * norm), m < M, by the whole block.
template <int M>
__device__ void NormRows(const GemvArgs& a, uint16_t* xs) {
  __shared__ float inv[M];
  const int K4 = a.k / 4;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float4* x = reinterpret_cast<const float4*>(a.xf + static_cast<int64_t>(m) * a.k);
    float ss = 0;
    for (int i = threadIdx.x; i < K4; i += blockDim.x) {
      const float4 v = x[i];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = BlockSum(ss);
    if (threadIdx.x == 0) inv[m] = rsqrtf(ss / a.k + a.eps);
  }
  __syncthreads();
  const float4* w = reinterpret_cast<const float4*>(a.norm);
  uint2* out = reinterpret_cast<uint2*>(xs);
  for (int e = threadIdx.x; e < M * K4; e += blockDim.x) {
    const int m = e / K4, i = e % K4;
    const float4 v = reinterpret_cast<const float4*>(a.xf)[e], g = w[i];
    const float s = inv[m];
    out[e] = make_uint2(Pack2(v.x * s * g.x, v.y * s * g.y), Pack2(v.z * s * g.z, v.w * s * g.w));
  }
}

// 16 e4m3 values of a 16-byte piece, as floats.
__device__ __forceinline__ void UnpackFp8(uint4 v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 lo = Fp8x2ToFloat2(static_cast<uint16_t>(w[i] & 0xffffu));
    const float2 hi = Fp8x2ToFloat2(static_cast<uint16_t>(w[i] >> 16));
    f[4 * i] = lo.x, f[4 * i + 1] = lo.y, f[4 * i + 2] = hi.x, f[4 * i + 3] = hi.y;
  }
}

// F8: w8 holds e4m3 weights (16 per 16-byte piece), each row's products
// multiplied by its scale at the end.
template <int M, int U, bool F8>
__global__ void __launch_bounds__(kGemvWarps * 32) GemvKernel(GemvArgs a) {
  extern __shared__ __align__(16) uint16_t xs[];
  __shared__ float part[kGemvWarps][M];  // each warp's sums of one round
  Release();
  constexpr int kPer = F8 ? 16 : 8;  // weights per 16-byte piece
  const int K8 = a.k / 8, KP = a.k / kPer;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int S = a.split, per_block = kGemvWarps / S;
  // This warp's row in the block's round, and its slice [p0, p1) of the pieces.
  const int slot = warp / S, slice = warp % S;
  const int p0 = slice * KP / S, p1 = (slice + 1) * KP / S;
  const bool rope = a.rope.n_head > 0;
  const bool paired = a.act || rope;  // rows 2j and 2j + 1 meet behind the product
  auto load = [&](int r, int base, uint4* wv) {
    if (rope) r = RopeRow(a.rope, r);
    const uint4* wr = F8 ? reinterpret_cast<const uint4*>(a.w8 + static_cast<int64_t>(r) * a.k)
                         : reinterpret_cast<const uint4*>(a.w + static_cast<int64_t>(r) * a.k);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * 32;
      wv[u] = i < p1 ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
    }
  };
  uint4 wv[U];
  int row0 = blockIdx.x * per_block;
  if (row0 + slot < a.n) load(row0 + slot, p0 + lane, wv);
  Acquire();
  if (a.xf) {
    NormRows<M>(a, xs);
  } else {
    const uint4* src = reinterpret_cast<const uint4*>(a.x);
    uint4* dst = reinterpret_cast<uint4*>(xs);
    for (int i = threadIdx.x; i < M * K8; i += blockDim.x) dst[i] = src[i];
  }
  __syncthreads();
  const uint4* xv = reinterpret_cast<const uint4*>(xs);
  for (; row0 < a.n; row0 += gridDim.x * per_block) {
    const int row = row0 + slot;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0;
    if (row < a.n) {
      for (int base = p0 + lane; base < p1; base += 32 * U) {
        if (base != p0 + lane) load(row, base, wv);  // the first pieces are already in wv
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int i = base + u * 32;
          if (i >= p1) break;
          float wf[kPer];
          if constexpr (F8) {
            UnpackFp8(wv[u], wf);
          } else {
            Unpack(wv[u], wf);
          }
#pragma unroll
          for (int m = 0; m < M; ++m) {
#pragma unroll
            for (int h = 0; h < kPer / 8; ++h) {
              float xf[8];
              Unpack(xv[m * K8 + i * (kPer / 8) + h], xf);
#pragma unroll
              for (int j = 0; j < 8; ++j) acc[m] += wf[8 * h + j] * xf[j];
            }
          }
        }
      }
      const int next = row + gridDim.x * per_block;
      if (next < a.n) load(next, p0 + lane, wv);
    }
    const float row_scale = F8 && row < a.n ? a.w_scale[rope ? RopeRow(a.rope, row) : row] : 1.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float v = WarpSum(acc[m]) * row_scale;
      if (S == 1 && !paired) {  // the warp's own row: no meeting needed
        if (lane == 0 && row < a.n) {
          float* y = a.y + static_cast<int64_t>(m) * a.n + row;
          *y = a.accumulate ? *y + v : v;
        }
      } else if (lane == 0) {
        part[warp][m] = v;
      }
    }
    if (S == 1 && !paired) continue;
    __syncthreads();
    // The round's sums: of each row its S slices in order; with act, rows
    // 2j and 2j + 1 (a gate and an up projection) give act[m, j]; with
    // rope, they are a pair that rotates together.
    const int outs = paired ? per_block / 2 : per_block;
    for (int e = threadIdx.x; e < outs * M; e += blockDim.x) {
      const int o = e / M, m = e % M;
      auto total = [&](int r) {
        float v = 0;
        for (int s = 0; s < S; ++s) v += part[r * S + s][m];
        return v;
      };
      if (a.act) {
        const int r = row0 + 2 * o;
        if (r < a.n)
          a.act[static_cast<int64_t>(m) * (a.n / 2) + r / 2] =
              ToBf(GateOf(a.gate, total(2 * o)) * total(2 * o + 1));
      } else if (rope) {
        const int r = row0 + 2 * o;
        if (r < a.n)
          RopeStorePair(a.rope, m, RopeRow(a.rope, r), RopeRow(a.rope, r + 1), total(2 * o),
                        total(2 * o + 1));
      } else if (row0 + o < a.n) {
        float* y = a.y + static_cast<int64_t>(m) * a.n + row0 + o;
        *y = a.accumulate ? *y + total(o) : total(o);
      }
    }
    __syncthreads();
  }
}

// y[m, :] = (x[m, :] . w[r, :]) * x_scale[m] * w_scale[r] on e4m3 tensor
// cores (mma m16n8k32): the tokens are the 16 rows of A (those past
// a.rows zero), 8 weight rows the 8 columns of B. The order of the k terms
// does not matter to a dot product, so each lane loads 16 contiguous bytes
// of its weight row (and of its tokens' x) and hands them to two mmas as
// the k positions those fragments hold: every load is a coalesced 16-byte
// one, and no fragment is shuffled. A block's 8 warps take a row group of 8
// each a slice of k, summed in shared memory.
__device__ __forceinline__ void MmaFp8(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int U>
__global__ void __launch_bounds__(kGemvWarps * 32) GemvFp8Kernel(GemvFp8Args a) {
  __shared__ float red[kGemvWarps][16][8];
  Release();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, tig = lane % 4;
  const int steps = a.k / 64;  // of 64 columns
  const int s0 = warp * steps / kGemvWarps, s1 = (warp + 1) * steps / kGemvWarps;
  const int groups = a.n / 8;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  auto load = [&](int g, int s, uint4* wv) {
    const uint8_t* w = a.w + static_cast<int64_t>(g * 8 + gid) * a.k + tig * 16;
#pragma unroll
    for (int u = 0; u < U; ++u)
      wv[u] = s + u < s1 ? __ldg(reinterpret_cast<const uint4*>(w + (s + u) * 64)) : zero;
  };
  uint4 wv[U];
  int g = blockIdx.x;
  if (g < groups) load(g, s0, wv);  // before waiting for the kernel that wrote x
  Acquire();
  const uint8_t* x0 = a.x + static_cast<int64_t>(gid) * a.k + tig * 16;
  const uint8_t* x1 = x0 + static_cast<int64_t>(8) * a.k;
  const bool has0 = gid < a.rows, has1 = gid + 8 < a.rows;
  for (; g < groups; g += gridDim.x) {
    float c[4] = {0, 0, 0, 0};
    for (int s = s0; s < s1; s += U) {
      if (s != s0) load(g, s, wv);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (s + u >= s1) break;
        const int col = (s + u) * 64;
        const uint4 xa = has0 ? __ldg(reinterpret_cast<const uint4*>(x0 + col)) : zero;
        const uint4 xb = has1 ? __ldg(reinterpret_cast<const uint4*>(x1 + col)) : zero;
        MmaFp8(c, xa.x, xb.x, xa.y, xb.y, wv[u].x, wv[u].y);
        MmaFp8(c, xa.z, xb.z, xa.w, xb.w, wv[u].z, wv[u].w);
      }
    }
    if (g + gridDim.x < groups) load(g + gridDim.x, s0, wv);
    red[warp][gid][2 * tig] = c[0];
    red[warp][gid][2 * tig + 1] = c[1];
    red[warp][gid + 8][2 * tig] = c[2];
    red[warp][gid + 8][2 * tig + 1] = c[3];
    __syncthreads();
    auto total = [&](int m, int r) {
      float v = 0;
#pragma unroll
      for (int w = 0; w < kGemvWarps; ++w) v += red[w][m][r];
      return v * a.x_scale[m] * a.w_scale[g * 8 + r];
    };
    if (a.act) {  // rows 2j, 2j + 1: a gate and an up projection
      for (int e = threadIdx.x; e < a.rows * 4; e += blockDim.x) {
        const int m = e / 4, j = e % 4;
        a.act[static_cast<int64_t>(m) * (a.n / 2) + g * 4 + j] =
            ToBf(GateOf(a.gate, total(m, 2 * j)) * total(m, 2 * j + 1));
      }
    } else {
      for (int e = threadIdx.x; e < a.rows * 8; e += blockDim.x) {
        const int m = e / 8, r = e % 8;
        float* y = a.y + static_cast<int64_t>(m) * a.n + g * 8 + r;
        const float v = total(m, r);
        *y = a.accumulate ? *y + v : v;
      }
    }
    __syncthreads();
  }
}

// As QuantizeRowsFp8Kernel, of the rows of x RMS-normalized with `norm`.
__global__ void QuantizeNormRowsFp8Kernel(const float* x, const float* norm, float eps, int k,
                                          uint8_t* q, float* scale) {
  Release();
  Acquire();
  const int64_t r = blockIdx.x;
  const float* row = x + r * k;
  float ss = 0;
  for (int i = threadIdx.x; i < k; i += blockDim.x) ss += row[i] * row[i];
  const float inv = rsqrtf(BlockSum(ss) / k + eps);
  float mx = 0;
  for (int i = threadIdx.x; i < k; i += blockDim.x) mx = fmaxf(mx, fabsf(row[i] * inv * norm[i]));
  mx = BlockMax(mx);
  const float s = mx > 0 ? mx / kFp8Max : 1.0f, to = inv / s;
  uint8_t* out = q + r * k;
  for (int i = threadIdx.x; i < k; i += blockDim.x)
    out[i] = __nv_cvt_float_to_fp8(row[i] * to * norm[i], __NV_SATFINITE, __NV_E4M3);
  if (threadIdx.x == 0) scale[r] = s;
}

template <int M, int U, bool F8>
int LaunchGemv(const GemvArgs& a, cudaStream_t s) {
  const int smem = M * a.k * static_cast<int>(sizeof(uint16_t));
  constexpr int kStatic = kGemvWarps * M * static_cast<int>(sizeof(float));
  static std::atomic<int> configured[64] = {};  // the largest allowed so far, per device
  if (const int e = AllowSmem(GemvKernel<M, U, F8>, smem, kStatic, configured)) return e;
  // One round of the blocks that fit on the device at once: more would wait
  // for a second round, and rows stride over the grid anyway.
  int device = 0;
  cudaGetDevice(&device);
  static std::mutex mu;
  static std::map<std::pair<int, int>, int> resident;  // by (device, smem)
  int fit = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    int& r = resident[{device, smem}];
    if (r == 0) {
      int sms = 0, per_sm = 0;
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, GemvKernel<M, U, F8>, kGemvWarps * 32, smem);
      if (e != cudaSuccess) return static_cast<int>(e);
      r = std::max(1, per_sm) * sms;
    }
    fit = r;
  }
  const int per_block = kGemvWarps / a.split;
  const int blocks = std::min((a.n + per_block - 1) / per_block, fit);
  return Launch(GemvKernel<M, U, F8>, dim3(blocks), dim3(kGemvWarps * 32), smem, s, a);
}

// Top-k of a row. Keys are the floats' bits mapped so that unsigned order is
// float order (-0 taken as +0, as the host's comparison does); the k-th
// largest key is found by four rounds of an 8-bit radix histogram, then the
// keys above it and the first of those equal to it (lowest indices, as the
// host breaks ties) are gathered and ranked.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t b = f == 0.0f ? 0u : __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Argmax of a row in kArgmaxParts blocks (one block reading 0.5 MB of
// logits waits on memory for ~50 us; the parts read theirs at once). Each
// part takes the largest key (OrderKey << 32 | ~(index0 + index): the lowest
// index of equal values the largest; a part that saw a value not finite:
// all ones) into its row's scratch[0] by atomicMax, counts itself in
// scratch[1], and the last part writes the key out and clears both: the
// scratch is zero between calls.
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxParts = 32;

__global__ void __launch_bounds__(kArgmaxThreads)
    ArgmaxKernel(const float* x, int n, int chunk, uint32_t index0, unsigned long long* scratch,
                 unsigned long long* keys) {
  Release();
  Acquire();
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  const int begin = blockIdx.y * chunk, end = min(n, begin + chunk);
  unsigned long long best = 0;
  bool finite = true;
#pragma unroll 8
  for (int i = begin + threadIdx.x; i < end; i += kArgmaxThreads) {
    const float v = row[i];
    finite &= isfinite(v);
    const unsigned long long key = static_cast<unsigned long long>(OrderKey(v)) << 32 |
                                   (0xffffffffu - (index0 + static_cast<uint32_t>(i)));
    best = key > best ? key : best;
  }
  finite = __syncthreads_and(finite);
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other > best ? other : best;
  }
  __shared__ unsigned long long warp_best[kArgmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kArgmaxThreads / 32; ++w) best = warp_best[w] > best ? warp_best[w] : best;
  unsigned long long* key = scratch + 2 * static_cast<int64_t>(blockIdx.x);
  atomicMax(key, finite ? best : ~0ull);
  __threadfence();
  if (atomicAdd(key + 1, 1ull) != gridDim.y - 1) return;
  keys[blockIdx.x] = atomicExch(key, 0ull);
  key[1] = 0;
}

__global__ void __launch_bounds__(1024)
    TopKKernel(const float* x, int n, int k, int32_t* ids, float* vals) {
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  __shared__ unsigned hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need, s_bad, s_gt, s_eq_base;
  __shared__ int warp_eq[32];
  __shared__ uint32_t cand_key[kTopKMax];
  __shared__ int cand_id[kTopKMax];
  if (threadIdx.x == 0) s_bad = 0, s_gt = 0, s_eq_base = 0;
  uint32_t prefix = 0, mask = 0;
  int need = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    bool bad = false;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float f = row[i];
      bad |= !isfinite(f);
      const uint32_t key = OrderKey(f);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    if (bad) s_bad = 1;
    __syncthreads();
    if (threadIdx.x == 0) {
      int b = 255;
      while (b > 0 && static_cast<int>(hist[b]) < need) need -= hist[b--];
      s_prefix = prefix | (static_cast<uint32_t>(b) << shift);
      s_need = need;
    }
    __syncthreads();
    prefix = s_prefix;
    need = s_need;
    mask |= 255u << shift;
  }
  // prefix is the k-th largest key; `need` of the keys equal to it are taken.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int base = 0; base < n; base += blockDim.x) {
    const int i = base + threadIdx.x;
    const uint32_t key = i < n ? OrderKey(row[i]) : 0u;
    if (i < n && key > prefix) {
      const int at = atomicAdd(&s_gt, 1);
      cand_key[at] = key, cand_id[at] = i;
    }
    const bool eq = i < n && key == prefix;
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_eq[warp] = __popc(ballot);
    __syncthreads();
    int before = s_eq_base, total = 0;
    for (int w = 0; w < warps; ++w) {
      if (w < warp) before += warp_eq[w];
      total += warp_eq[w];
    }
    before += __popc(ballot & ((1u << lane) - 1u));
    if (eq && before < need) cand_key[k - need + before] = key, cand_id[k - need + before] = i;
    __syncthreads();
    if (threadIdx.x == 0) s_eq_base += total;
    __syncthreads();
  }
  if (threadIdx.x < k) {
    const uint32_t key = cand_key[threadIdx.x];
    const int id = cand_id[threadIdx.x];
    int rank = 0;
    for (int j = 0; j < k; ++j)
      rank += cand_key[j] > key || (cand_key[j] == key && cand_id[j] < id);
    const int64_t out = static_cast<int64_t>(blockIdx.x) * k;
    ids[out + rank] = id;
    vals[out + rank] = row[id];
  }
  __syncthreads();
  if (threadIdx.x == 0 && s_bad) ids[static_cast<int64_t>(blockIdx.x) * k] = -1;
}

// Whether a's heads split into the pairs RopeRow takes.
bool RopePairs(const RopeKvArgs& a) {
  return a.head_dim % 2 == 0 && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim;
}

}  // namespace

template <bool F8>
int GemvOf(const GemvArgs& a, cudaStream_t s) {
  const bool deep = a.depth == 8;
  switch (a.rows) {
    case 1:
      return deep ? LaunchGemv<1, 8, F8>(a, s) : LaunchGemv<1, 4, F8>(a, s);
    case 2:
      return deep ? LaunchGemv<2, 8, F8>(a, s) : LaunchGemv<2, 4, F8>(a, s);
    case 3:
      return deep ? LaunchGemv<3, 8, F8>(a, s) : LaunchGemv<3, 4, F8>(a, s);
    default:
      return deep ? LaunchGemv<4, 8, F8>(a, s) : LaunchGemv<4, 4, F8>(a, s);
  }
}

int Gemv(const GemvArgs& a, void* stream) {
  const bool f8 = a.w8 != nullptr;
  if (a.rows < 1 || a.rows > kGemvMaxRows || a.k % (f8 ? 16 : 8) != 0 || (a.act && a.n % 8 != 0) ||
      (a.xf && !a.norm) || (a.depth != 4 && a.depth != 8) || (f8 && !a.w_scale) ||
      (a.split != 1 && a.split != 2 && a.split != 4))
    return -1;
  const RopeKvArgs& r = a.rope;
  if (r.n_head > 0 &&
      (a.act || r.n != a.rows || !RopePairs(r) || a.n != (r.n_head + 2 * r.n_kv) * r.head_dim ||
       !r.q || !r.pos || !r.slot || !r.inv_freq || !r.k_cache || !r.v_cache || r.block_size < 1))
    return -1;
  return f8 ? GemvOf<true>(a, S(stream)) : GemvOf<false>(a, S(stream));
}

int GemvFp8(const GemvFp8Args& a, void* stream) {
  if (a.rows < 1 || a.rows > kGemvFp8MaxRows || a.n % 8 != 0 || a.k % 64 != 0 || !a.w ||
      !a.w_scale || !a.x || !a.x_scale || (!a.y && !a.act))
    return -1;
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int blocks = std::min(a.n / 8, 16 * sms);
  return Launch(GemvFp8Kernel<4>, dim3(blocks), dim3(kGemvWarps * 32), 0, S(stream), a);
}

int QuantizeNormRowsFp8(const float* x, const float* norm, float eps, int n, int k, uint8_t* q,
                        float* scale, void* stream) {
  return n > 0 ? Launch(QuantizeNormRowsFp8Kernel, dim3(n), dim3(256), 0, S(stream), x, norm, eps,
                        k, q, scale)
               : 0;
}

int QuantizeRowsFp8(const uint16_t* w, int64_t n, int k, uint8_t* q, float* scale, void* stream) {
  if (n <= 0) return 0;
  if (n > 0x7fffffff) return -1;
  return Launch(QuantizeRowsFp8Kernel, dim3(static_cast<unsigned>(n)), dim3(256), 0, S(stream), w,
                k, q, scale);
}

int DequantizeRowsFp8(const uint8_t* q, const float* scale, int64_t n, int k, uint16_t* w,
                      void* stream) {
  if (k % 2 != 0) return -1;
  const int64_t pairs = n * k / 2;
  if (pairs > 0)
    DequantizeRowsFp8Kernel<<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, S(stream)>>>(
        q, scale, n, k, w);
  return Err();
}

int ArgmaxRows(const float* x, int rows, int n, int index0, uint64_t* keys, uint64_t* scratch,
               void* stream) {
  if (rows <= 0 || n <= 0) return 0;
  if (index0 < 0 || static_cast<int64_t>(index0) + n > int64_t{1} << 31) return -1;
  const int parts = std::min(kArgmaxParts, (n + 8 * kArgmaxThreads - 1) / (8 * kArgmaxThreads));
  const int chunk = (n + parts - 1) / parts;
  return Launch(ArgmaxKernel, dim3(rows, parts), dim3(kArgmaxThreads), 0, S(stream), x, n, chunk,
                static_cast<uint32_t>(index0), reinterpret_cast<unsigned long long*>(scratch),
                reinterpret_cast<unsigned long long*>(keys));
}

int TopKRows(const float* x, int rows, int n, int k, int32_t* ids, float* vals, void* stream) {
  if (k < 1 || k > kTopKMax || k > n) return -1;
  if (rows > 0) TopKKernel<<<rows, 1024, 0, S(stream)>>>(x, n, k, ids, vals);
  return Err();
}

int Embed(const uint16_t* table, const int32_t* ids, int n, int dim, float scale, float* x,
          void* stream) {
  return n > 0 ? Launch(EmbedKernel, dim3(n), dim3(256), 0, S(stream), table, ids, dim, scale, x)
               : 0;
}

int RmsNormAdd(const float* y, const float* w, int n, int dim, float eps, float* x, void* stream) {
  return n > 0 ? Launch(RmsNormAddKernel, dim3(n), dim3(256), 0, S(stream), y, w, dim, eps, x) : 0;
}

int QkNorm(float* qkv, const float* bias, const float* q_norm, const float* k_norm, int n,
           int n_head, int n_kv, int head_dim, float eps, void* stream) {
  if (n == 0) return 0;
  // 8 warps per block, blocks along y so that every head has its warp.
  const int heads = n_head + 2 * n_kv;
  return Launch(QkNormKernel, dim3(n, (heads + 7) / 8), dim3(256), 0, S(stream), qkv, bias, q_norm,
                k_norm, n_head, n_kv, head_dim, eps);
}

int RmsNorm(const float* x, const float* w, const int32_t* rows, int n, int dim, float eps,
            uint16_t* out, void* stream) {
  return n > 0 ? Launch(RmsNormKernel, dim3(n), dim3(256), 0, S(stream), x, w, rows, dim, eps, out)
               : 0;
}

int RopeStoreKv(const RopeKvArgs& a, void* stream) {
  if (!RopePairs(a)) return -1;
  const int pairs = (a.n_head + 2 * a.n_kv) * a.head_dim / 2;
  return a.n > 0 ? Launch(RopeKvKernel, dim3(a.n, (pairs + 255) / 256), dim3(256), 0, S(stream), a)
                 : 0;
}

int GatedActivation(const float* gu, int n, int n_ff, Gate gate, uint16_t* out, void* stream) {
  const int threads = n_ff % 2 == 0 ? n_ff / 2 : n_ff;  // an even width takes two pairs a thread
  return n > 0 ? Launch(GatedActivationKernel, dim3((threads + 255) / 256, n), dim3(256), 0,
                        S(stream), gu, n_ff, gate, out)
               : 0;
}

bool DecodeAttentionSupports(int head_dim, int group) {
  return (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 ||
          head_dim == 256) &&
         group >= 1 && group <= 8;
}

int DecodeAttention(const DecodeAttentionArgs& a, void* stream) {
  if (a.n == 0) return 0;
  const int g = a.n_head / a.n_kv;
  if (!DecodeAttentionSupports(a.head_dim, g) || a.n_split > 32 || (a.n_split > 1 && !a.counters) ||
      a.prefix_ranges < 1 || a.prefix_ranges > kMaxPrefixRanges)
    return -1;
  cudaStream_t s = S(stream);
  if (a.tensor_cores && a.block_size % 16 == 0) {
    if (a.head_dim == 64) return LaunchDecodeMma<64>(a, s);
    if (a.head_dim == 128) return LaunchDecodeMma<128>(a, s);
  }
  switch (a.head_dim) {
    case 16:
      return g <= 4 ? LaunchDecode<16, 4>(a, s) : LaunchDecode<16, 8>(a, s);
    case 32:
      return g <= 4 ? LaunchDecode<32, 4>(a, s) : LaunchDecode<32, 8>(a, s);
    case 64:
      return g <= 4 ? LaunchDecode<64, 4>(a, s) : LaunchDecode<64, 8>(a, s);
    case 128:
      return g <= 4 ? LaunchDecode<128, 4>(a, s) : LaunchDecode<128, 8>(a, s);
    default:
      return g <= 4 ? LaunchDecode<256, 4>(a, s) : LaunchDecode<256, 8>(a, s);
  }
}

bool CascadeAttentionSupports(int head_dim, int group, int block_size) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= 8 && block_size % 16 == 0;
}

template <int HD, bool F8>
int LaunchCascade(const CascadeAttentionArgs& a, cudaStream_t s) {
  static std::atomic<int> configured[64] = {};
  constexpr int smem = CascadeSmem<HD, F8>();
  if (const int e = AllowSmem(CascadeAttentionKernel<HD, F8>, smem, 0, configured)) return e;
  const dim3 grid(a.n_work, a.n_kv), block(kCascadeWarps * 32);
  return Launch(CascadeAttentionKernel<HD, F8>, grid, block, smem, s, a);
}
template <int HD>
int LaunchCascade(const CascadeAttentionArgs& a, cudaStream_t s) {
  return a.cache == KvCache::kE4m3 ? LaunchCascade<HD, true>(a, s) : LaunchCascade<HD, false>(a, s);
}

// Blocks of the bf16-cache kernel resident per SM (the e4m3 one needs as
// much shared memory: stages of half the bytes plus an fp16 tile).
template <int HD>
int CascadeResident() {
  static_assert(CascadeSmem<HD, true>() <= CascadeSmem<HD, false>(), "as many fit");
  constexpr int smem = CascadeSmem<HD, false>();
  auto kernel = CascadeAttentionKernel<HD, false>;
  int n = 0;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kCascadeWarps * 32, smem);
  return e == cudaSuccess ? std::max(1, n) : 1;
}

int CascadeAttentionBlocksPerSm(int head_dim) {
  return head_dim == 64 ? CascadeResident<64>() : CascadeResident<128>();
}

int CascadeAttention(const CascadeAttentionArgs& a, void* stream) {
  if (a.n_work == 0) return 0;
  if (!CascadeAttentionSupports(a.head_dim, a.n_head / a.n_kv, a.block_size) || a.n_ranges < 1 ||
      a.n_ranges > kMaxPrefixRanges)
    return -1;
  return a.head_dim == 64 ? LaunchCascade<64>(a, S(stream)) : LaunchCascade<128>(a, S(stream));
}

int GatherKv(const void* k_cache, const void* v_cache, KvCache cache, const int32_t* table,
             int key0, int n_keys, int n_kv, int head_dim, int block_size, uint16_t* kc,
             uint16_t* vc, void* stream) {
  const dim3 grid(n_keys, n_kv);
  if (cache == KvCache::kE4m3)
    GatherKvKernel<true><<<grid, head_dim, 0, S(stream)>>>(k_cache, v_cache, table, key0, n_keys,
                                                           n_kv, head_dim, block_size, kc, vc);
  else
    GatherKvKernel<false><<<grid, head_dim, 0, S(stream)>>>(k_cache, v_cache, table, key0, n_keys,
                                                            n_kv, head_dim, block_size, kc, vc);
  return Err();
}

int GatherHeads(const float* q, int row0, int n, int n_head, int head_dim, uint16_t* qh,
                void* stream) {
  GatherHeadsKernel<<<dim3(n, n_head), head_dim, 0, S(stream)>>>(q, row0, n, n_head, head_dim, qh);
  return Err();
}

int CausalSoftmax(const float* s, int rows, int n, int n_keys, int key0, int window, uint16_t* p,
                  void* stream) {
  CausalSoftmaxKernel<<<rows, 256, 0, S(stream)>>>(s, n, n_keys, key0, window, p);
  return Err();
}

int ScatterHeads(const uint16_t* oh, int row0, int n, int n_head, int head_dim, uint16_t* out,
                 void* stream) {
  ScatterHeadsKernel<<<dim3(n, n_head), head_dim, 0, S(stream)>>>(oh, row0, n, n_head, head_dim,
                                                                  out);
  return Err();
}

int F32ToBf16(const float* src, int64_t n, uint16_t* dst, void* stream) {
  if (n > 0)
    F32ToBf16Kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, S(stream)>>>(src, n, dst);
  return Err();
}

}  // namespace braid::kernels::cuda
