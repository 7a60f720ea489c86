// Host <-> device copies for the CUDA kernel tests and benchmarks, and
// their check for a GPU.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <vector>

namespace braid::kernels::cuda_test {

// The exit code for a run without a GPU (CTest's SKIP_RETURN_CODE).
inline constexpr int kNoGpu = 77;
// Whether a GPU is there; says "skipped: no GPU" when not.
inline bool HaveGpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) return true;
  std::printf("skipped: no GPU\n");
  return false;
}

// A device copy of `h` (at least one element allocated); the caller frees it.
template <typename T>
T* ToDevice(const std::vector<T>& h) {
  T* d = nullptr;
  cudaMalloc(&d, std::max<size_t>(1, h.size()) * sizeof(T));
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

// cudaFree of each.
inline void FreeAll(std::initializer_list<const void*> ps) {
  for (const void* p : ps) cudaFree(const_cast<void*>(p));
}

template <typename T>
std::vector<T> ToHost(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

inline void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Device bytes filled with small random values (bf16 or e4m3 alike: random
// bytes with the exponent's high bits cleared stay finite and small).
inline void* Noise(size_t bytes, uint32_t seed) {
  void* p = nullptr;
  Check(cudaMalloc(&p, bytes), "cudaMalloc");
  std::vector<uint8_t> h(bytes);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < bytes; ++i) h[i] = static_cast<uint8_t>(rng()) & 0x3b;
  Check(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  return p;
}

// Read-and-write bytes per second of a 2 GiB device-to-device copy (median).
inline double CopyRate() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  Check(cudaMalloc(&a, bytes), "cudaMalloc");
  Check(cudaMalloc(&b, bytes), "cudaMalloc");
  cudaMemset(a, 1, bytes);
  cudaMemset(b, 2, bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> rates;
  for (int i = 0; i < 8; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 2) rates.push_back(2.0 * bytes / (ms * 1e-3));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace braid::kernels::cuda_test
