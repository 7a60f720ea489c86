// CUDA dequantization kernels: one thread per output element; block layouts
// as in kernels/ref (the source of truth they are tested against).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda_dequant.h"

namespace braid::kernels::cuda {
namespace {

constexpr int kQK = 32;

__device__ float Half(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Q4_0: 18 bytes = fp16 d, 16 bytes of nibbles; element j = d * (nibble - 8),
// low nibbles first (j < 16), then high nibbles.
__global__ void DequantQ4_0(const uint8_t* src, float* dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const uint8_t* b = src + (i / kQK) * 18;
  const int j = static_cast<int>(i % kQK);
  const uint16_t d = static_cast<uint16_t>(b[0] | (b[1] << 8));
  const uint8_t q = b[2 + (j % 16)];
  const int v = j < 16 ? (q & 15) : (q >> 4);
  dst[i] = Half(d) * static_cast<float>(v - 8);
}

// Q4_1: 20 bytes = fp16 d, fp16 m, 16 bytes of nibbles; element = d * q + m.
__global__ void DequantQ4_1(const uint8_t* src, float* dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const uint8_t* b = src + (i / kQK) * 20;
  const int j = static_cast<int>(i % kQK);
  const uint16_t d = static_cast<uint16_t>(b[0] | (b[1] << 8));
  const uint16_t m = static_cast<uint16_t>(b[2] | (b[3] << 8));
  const uint8_t q = b[4 + (j % 16)];
  const int v = j < 16 ? (q & 15) : (q >> 4);
  dst[i] = Half(d) * static_cast<float>(v) + Half(m);
}

// Q8_0: 34 bytes = fp16 d, 32 int8; element = d * q.
__global__ void DequantQ8_0(const uint8_t* src, float* dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const uint8_t* b = src + (i / kQK) * 34;
  const uint16_t d = static_cast<uint16_t>(b[0] | (b[1] << 8));
  dst[i] = Half(d) * static_cast<float>(static_cast<int8_t>(b[2 + i % kQK]));
}

__global__ void DequantF16(const uint16_t* src, float* dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = Half(src[i]);
}

__global__ void DequantBF16(const uint16_t* src, float* dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
}

__global__ void CopyF32(const float* src, float* dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = src[i];
}

}  // namespace

int DequantizeRow(DType type, const void* src, float* dst, int64_t n, void* stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const auto* u8 = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::kQ4_0:
      DequantQ4_0<<<blocks, threads, 0, s>>>(u8, dst, n);
      break;
    case DType::kQ4_1:
      DequantQ4_1<<<blocks, threads, 0, s>>>(u8, dst, n);
      break;
    case DType::kQ8_0:
      DequantQ8_0<<<blocks, threads, 0, s>>>(u8, dst, n);
      break;
    case DType::kF16:
      DequantF16<<<blocks, threads, 0, s>>>(static_cast<const uint16_t*>(src), dst, n);
      break;
    case DType::kBF16:
      DequantBF16<<<blocks, threads, 0, s>>>(static_cast<const uint16_t*>(src), dst, n);
      break;
    case DType::kF32:
      CopyF32<<<blocks, threads, 0, s>>>(static_cast<const float*>(src), dst, n);
      break;
    default:
      return -1;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace braid::kernels::cuda
