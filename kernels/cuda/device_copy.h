// Host <-> device copies for the CUDA kernel tests and benchmarks, and
// their check for a GPU.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
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

template <typename T>
std::vector<T> ToHost(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

}  // namespace braid::kernels::cuda_test
