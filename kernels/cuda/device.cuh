// Device helpers shared by the CUDA kernel files (ops.cu, decode_layers.cu):
// bf16 and e4m3 conversions, programmatic dependent launch, the RoPE pair
// arithmetic (one definition, so that every kernel that rotates or stores K
// and V rounds the same), the gates, and the launch helper.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda_ops.h"

namespace braid::kernels::cuda::dev {

__device__ __forceinline__ float Bf(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
__device__ __forceinline__ uint16_t ToBf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// Two e4m3 values (the first in the low byte) as fp16 (exact), as floats.
__device__ __forceinline__ uint32_t Fp8x2ToHalf2(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float2 Fp8x2ToFloat2(uint16_t v) {
  const uint32_t h = Fp8x2ToHalf2(v);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}
__device__ __forceinline__ float Fp8ToFloat(uint8_t v) { return Fp8x2ToFloat2(v).x; }

// Two floats as a bf16 pair, lo in the low half.
__device__ __forceinline__ uint32_t Pack2(float lo, float hi) {
  return static_cast<uint32_t>(ToBf(lo)) | (static_cast<uint32_t>(ToBf(hi)) << 16);
}

inline int Err() { return static_cast<int>(cudaGetLastError()); }
inline cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }

// Programmatic dependent launch (sm_90): kernels of the decode path are
// launched so that each may start while the one before it finishes. Each
// lets its successor launch at once (Release) and, before it touches
// anything an earlier kernel wrote, waits for that kernel to complete
// (Acquire); only reads of weights come before the wait. Launched without
// the attribute, both are no-ops.
__device__ __forceinline__ void Release() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void Acquire() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// kernel<<<grid, block, smem, s>>>(args...) with one launch attribute.
template <typename... Params, typename... Args>
int LaunchWith(cudaLaunchAttribute attr, void (*kernel)(Params...), dim3 grid, dim3 block,
               size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = s;
  config.attrs = &attr;
  config.numAttrs = 1;
  return static_cast<int>(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}
// The decode path's launches: programmatic dependent launch.
template <typename... Params, typename... Args>
int Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
           Args&&... args) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return LaunchWith(attr, kernel, grid, block, smem, s, std::forward<Args>(args)...);
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A pair (x0, x1) of a head rotated by pos * inv_freq, rounded the same
// wherever it is computed (no contraction into fused multiply-adds), so
// that the RoPE kernel and the matrix-vector kernel's RoPE epilogue agree
// to the bit.
__device__ __forceinline__ void RotatePair(float x0, float x1, float inv_freq, int pos, float* y0,
                                           float* y1) {
  float s, co;
  sincosf(static_cast<float>(pos) * inv_freq, &s, &co);
  *y0 = __fsub_rn(__fmul_rn(x0, co), __fmul_rn(x1, s));
  *y1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, co));
}

// The row of Q, K and V that logical row r is, where logical rows 2j and
// 2j + 1 are a pair that rotates together (RopeKvKernel's threads, the
// RoPE-fused matrix-vector product's rows). Split halves (neox): within a
// head's first n_rot dimensions, dimension j and j + n_rot / 2; otherwise
// (adjacent pairs, the dimensions past n_rot, V) the rows in their order.
__device__ __forceinline__ int RopeRow(const RopeKvArgs& a, int r) {
  const int hd = a.head_dim;
  if (!a.neox || r >= (a.n_head + a.n_kv) * hd) return r;
  const int d = r % hd;
  if (d >= a.n_rot) return r;
  return r - d + (d % 2 ? d / 2 + a.n_rot / 2 : d / 2);
}

// Token m's rows ra and rc of Q, K and V, a pair that rotates together
// (ra the first), with products x0 and x1: the bias added, rotated where
// RoPE rotates them, then stored as RopeKvKernel stores them.
__device__ inline void RopeStorePair(const RopeKvArgs& a, int m, int ra, int rc, float x0,
                                     float x1) {
  const int hd = a.head_dim, q_dim = a.n_head * hd, kv_dim = a.n_kv * hd;
  x0 = x0 + (a.bias ? a.bias[ra] : 0.0f);
  x1 = x1 + (a.bias ? a.bias[rc] : 0.0f);
  const int d = ra % hd;
  if (ra < q_dim + kv_dim && (a.neox ? d < a.n_rot / 2 : d < a.n_rot))
    RotatePair(x0, x1, a.inv_freq[a.neox ? d : d / 2], a.pos[m], &x0, &x1);
  if (ra < q_dim) {
    a.q[static_cast<int64_t>(m) * q_dim + ra] = x0;
    a.q[static_cast<int64_t>(m) * q_dim + rc] = x1;
    return;
  }
  const int slot = a.slot[m];
  if (slot < 0) return;
  const bool k = ra < q_dim + kv_dim;
  const int e = ra - (k ? q_dim : q_dim + kv_dim);
  const int64_t blk = slot / a.block_size, s = slot % a.block_size;
  const int64_t at = ((blk * a.n_kv + e / hd) * a.block_size + s) * hd + e % hd;
  void* cache = k ? a.k_cache : a.v_cache;
  if (a.cache == KvCache::kE4m3) {
    uint8_t* c = static_cast<uint8_t*>(cache);
    c[at] = __nv_cvt_float_to_fp8(x0, __NV_SATFINITE, __NV_E4M3);
    c[at + (rc - ra)] = __nv_cvt_float_to_fp8(x1, __NV_SATFINITE, __NV_E4M3);
  } else {
    uint16_t* c = static_cast<uint16_t*>(cache);
    c[at] = ToBf(x0);
    c[at + (rc - ra)] = ToBf(x1);
  }
}

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + __expf(-g)); }
// GELU, tanh approximation: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
__device__ __forceinline__ float GeluTanh(float g) {
  return 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
}
__device__ __forceinline__ float GateOf(Gate gate, float g) {
  return gate == Gate::kGeluTanh ? GeluTanh(g) : Silu(g);
}

// Eight bf16s of a 16-byte piece as floats.
__device__ __forceinline__ void Unpack(uint4 v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

}  // namespace braid::kernels::cuda::dev
