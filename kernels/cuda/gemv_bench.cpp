// Times the matrix-vector kernel (Gemv) on the products of one decode token
// of the Llama-3-8B and Llama-3.2-1B shapes, for every depth (16-byte
// pieces in flight per lane) and split of k (warps to a row), as the decode
// step runs them: the RMSNorm fused in front of QKV and gate/up, the SwiGLU
// behind gate/up, Wo and down adding into the residual. Launches go back to
// back as in a decode step (each waits for the one before through
// programmatic dependent launch), timed with CUDA events over --reps of
// them, cycling over enough copies of the matrix that none is still in
// the L2 cache when it comes round again. Prints microseconds per product, the weights' read rate,
// and its share of the device-to-device copy rate measured in the same run (bytes read and written
// over the copy's time, as the engine's roofline counts it). Exits 77 without a GPU.
//   gemv_bench [--reps 50] [--rows 1] [--fp8]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device_copy.h"
#include "kernels/cuda_ops.h"

using namespace braid::kernels::cuda;
using braid::kernels::cuda_test::Check;
using braid::kernels::cuda_test::CopyRate;
using braid::kernels::cuda_test::Noise;

namespace {

struct Product {
  const char* model;
  const char* name;
  int n, k;
  bool norm, gated, accumulate;
};

}  // namespace

int main(int argc, char** argv) {
  if (!braid::kernels::cuda_test::HaveGpu()) return braid::kernels::cuda_test::kNoGpu;
  int reps = 50, rows = 1;
  bool fp8 = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {
      rows = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--fp8")) {
      fp8 = true;
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--rows R] [--fp8]\n", argv[0]);
      return 2;
    }
  }
  if (rows < 1 || rows > kGemvMaxRows || reps < 1) {
    std::fprintf(stderr, "--rows is 1 to %d, --reps at least 1\n", kGemvMaxRows);
    return 2;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const double copy = CopyRate();
  std::printf("%s, %d SMs; copy %.0f GB/s; %d row(s), %s weights, %d launches per time\n",
              prop.name, prop.multiProcessorCount, copy / 1e9, rows, fp8 ? "e4m3" : "bf16", reps);
  const Product products[] = {
      {"8B", "qkv", 6144, 4096, true, false, false},
      {"8B", "wo", 4096, 4096, false, false, true},
      {"8B", "gate/up", 28672, 4096, true, true, false},
      {"8B", "down", 4096, 14336, false, false, true},
      {"8B", "head", 128256, 4096, true, false, false},
      {"1B", "qkv", 3072, 2048, true, false, false},
      {"1B", "wo", 2048, 2048, false, false, true},
      {"1B", "gate/up", 16384, 2048, true, true, false},
      {"1B", "down", 2048, 8192, false, false, true},
      {"1B", "head", 128256, 2048, true, false, false},
  };
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::printf("%-3s %-8s %6s %6s |", "", "product", "n", "k");
  for (int depth : {4, 8})
    for (int split : {1, 2, 4}) std::printf("   d%d/s%d us (share)", depth, split);
  std::printf("\n");
  for (const Product& p : products) {
    const size_t elem = fp8 ? 1 : 2;
    const size_t w_bytes = static_cast<size_t>(p.n) * p.k * elem;
    // Copies of w: at least three L2 caches' worth of bytes in all.
    const size_t l2 = static_cast<size_t>(prop.l2CacheSize);
    const int copies = static_cast<int>(std::max<size_t>(1, (3 * l2 + w_bytes - 1) / w_bytes));
    std::vector<void*> w(copies);
    for (int c = 0; c < copies; ++c) w[c] = Noise(w_bytes, 17u + p.n + c);
    void* x = Noise(static_cast<size_t>(rows) * p.k * 2, 5u);
    float* xf = static_cast<float*>(Noise(static_cast<size_t>(rows) * p.k * 4, 6u));
    float* norm = static_cast<float*>(Noise(static_cast<size_t>(p.k) * 4, 7u));
    float* y = static_cast<float*>(Noise(static_cast<size_t>(rows) * p.n * 4, 8u));
    void* act = Noise(static_cast<size_t>(rows) * p.n, 9u);
    float* scale = static_cast<float*>(Noise(static_cast<size_t>(p.n) * 4, 10u));
    std::printf("%-3s %-8s %6d %6d |", p.model, p.name, p.n, p.k);
    for (int depth : {4, 8})
      for (int split : {1, 2, 4}) {
        GemvArgs a;
        a.rows = rows, a.n = p.n, a.k = p.k, a.depth = depth, a.split = split;
        a.accumulate = p.accumulate;
        auto use = [&](int r) {
          if (fp8) {
            a.w8 = static_cast<const uint8_t*>(w[r % copies]);
            a.w_scale = scale;
          } else {
            a.w = static_cast<const uint16_t*>(w[r % copies]);
          }
        };
        use(0);
        if (p.norm) {
          a.xf = xf, a.norm = norm, a.eps = 1e-5f;
        } else {
          a.x = static_cast<const uint16_t*>(x);
        }
        a.y = y;
        if (p.gated) a.act = static_cast<uint16_t*>(act);
        int e = Gemv(a, nullptr);  // warm-up
        cudaEventRecord(e0);
        for (int r = 0; r < reps && e == 0; ++r) {
          use(r + 1);
          e = Gemv(a, nullptr);
        }
        cudaEventRecord(e1);
        Check(cudaEventSynchronize(e1), "gemv");
        if (e != 0) {
          std::printf("  launch error %d", e);
          continue;
        }
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        const double s = ms * 1e-3 / reps;
        std::printf("   %7.1f (%5.1f%%)", s * 1e6, 100.0 * w_bytes / s / copy);
      }
    std::printf("\n");
    for (void* q : w) cudaFree(q);
    for (void* q : {x, static_cast<void*>(xf), static_cast<void*>(norm), static_cast<void*>(y), act,
                    static_cast<void*>(scale)})
      cudaFree(q);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}
