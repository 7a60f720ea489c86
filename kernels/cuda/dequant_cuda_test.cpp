// The CUDA dequantization kernels against the scalar reference on random
// blocks. Exits 77 ("skipped: no GPU", CTest SKIP_RETURN_CODE) without a device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "device_copy.h"
#include "kernels/cuda_dequant.h"
#include "kernels/quant.h"

using namespace braid::kernels;

int main() {
  if (!cuda_test::HaveGpu()) return cuda_test::kNoGpu;
  std::mt19937 rng(7);
  const int64_t n = 32 * 1024;
  int failures = 0;
  for (DType t :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ8_0}) {
    const size_t bytes = RowBytes(t, n);
    std::vector<uint8_t> raw(bytes);
    for (auto& b : raw) b = static_cast<uint8_t>(rng());
    // Keep every fp16/bf16 scale and value finite: rewrite them from small floats.
    const DTypeInfo& info = Info(t);
    for (size_t blk = 0; blk < bytes / info.block_bytes; ++blk) {
      uint8_t* p = &raw[blk * info.block_bytes];
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      auto put16 = [&](uint8_t* q, uint16_t v) { std::memcpy(q, &v, 2); };
      if (t == DType::kF16) put16(p, Fp32ToFp16(u(rng)));
      if (t == DType::kBF16) put16(p, Fp32ToBf16(u(rng)));
      if (t == DType::kF32) {
        float f = u(rng);
        std::memcpy(p, &f, 4);
      }
      if (t == DType::kQ4_0 || t == DType::kQ8_0) put16(p, Fp32ToFp16(u(rng) * 0.1f));
      if (t == DType::kQ4_1) {
        put16(p, Fp32ToFp16(u(rng) * 0.1f));
        put16(p + 2, Fp32ToFp16(u(rng)));
      }
    }
    std::vector<float> want(n), got(n);
    DequantizeRow(t, raw.data(), want.data(), n);
    void* dsrc = nullptr;
    float* ddst = nullptr;
    if (cudaMalloc(&dsrc, bytes) != cudaSuccess ||
        cudaMalloc(&ddst, n * sizeof(float)) != cudaSuccess) {
      std::printf("cudaMalloc failed\n");
      return 1;
    }
    cudaMemcpy(dsrc, raw.data(), bytes, cudaMemcpyHostToDevice);
    int err = cuda::DequantizeRow(t, dsrc, ddst, n, nullptr);
    cudaMemcpy(got.data(), ddst, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(dsrc);
    cudaFree(ddst);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i)
      if (!(got[i] == want[i]) && !(std::isnan(got[i]) && std::isnan(want[i]))) ++bad;
    std::printf("%-5s launch %d, %d of %lld elements differ\n", Info(t).name, err, bad,
                static_cast<long long>(n));
    failures += err != 0 || bad != 0;
  }
  std::printf("%d passed, %d failed\n", 6 - failures, failures);
  return failures == 0 ? 0 : 1;
}
