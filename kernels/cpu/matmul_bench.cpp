// Microbenchmark of MatMulQuantized on SmolLM2-135M's shapes (Q4_1 matrices and
// the tied Q8_0 49152 x 576 output head), 1 and 2 threads, n_tokens 1, 8 (one
// team of the serving engine at 16 concurrent) and 16,
// int8 and split 16-bit activations.
// Prints GB/s of weights streamed and GFLOP/s next to the read bandwidth that
// MeasureReadBandwidth finds in the same run, and their ratio.
//
// Each shape is replicated into enough copies to exceed the last-level cache
// (>= 256 MiB in total) and the copies are walked in turn, so weights come from
// DRAM as they do in a real decode. A smaller working set (third argument, in
// MiB; at least two copies) keeps small shapes in the caches: the kernels'
// compute alone.
//
// Usage: matmul_bench [seconds_per_case (default 0.5)] [shape name filter]
//                     [working set MiB (default 256)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm_peak.h"
#include "kernels/matmul.h"
#include "kernels/membw.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "ref/ref.h"

using namespace braid::kernels;

namespace {

struct Shape {
  const char* name;
  DType type;
  int64_t cols;  // input features (GGUF ne[0])
  int64_t rows;  // output features
};

size_t g_working_set = size_t{256} << 20;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Result {
  double gbps;
  double gflops;
};

// teams: every thread multiplies the whole matrix by its own n_tokens tokens
// (the serving engine's team per thread), else the threads split the rows.
Result Bench(ThreadPool& pool, const Shape& s, int n_tokens, ActPrecision precision, double seconds,
             bool interleaved, bool teams = false) {
  const size_t row_bytes = RowBytes(s.type, s.cols);
  const size_t mat_bytes = row_bytes * static_cast<size_t>(s.rows);
  const size_t copies = std::max<size_t>(2, g_working_set / mat_bytes);
  // Fill the copies with one random quantized matrix (content does not matter
  // for speed, but keep scales finite).
  std::vector<uint8_t> one(mat_bytes);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> rowf(s.cols);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (float& f : rowf) f = u(rng);
    ref::QuantizeWeights(s.type, rowf.data(), one.data() + r * row_bytes, s.cols);
  }
  if (interleaved) {  // the same matrix, 16-row groups (as the fast path loads it)
    std::vector<uint8_t> packed(InterleavedBytes(s.type, s.rows, s.cols) + 64);
    uint8_t* dst = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    Interleave(MatrixView{s.type, s.rows, s.cols, one.data(), row_bytes}, dst);
    std::memcpy(one.data(), dst, mat_bytes);  // same size: rows are a multiple of 16
  }
  auto* w =
      static_cast<uint8_t*>(std::aligned_alloc(4096, (copies * mat_bytes + 4095) / 4096 * 4096));
  pool.Run([&](int i) {  // first touch in parallel
    for (size_t c = i; c < copies; c += pool.size())
      std::memcpy(w + c * mat_bytes, one.data(), mat_bytes);
  });
  const DType at = ActivationType(s.type, precision);
  const size_t xb = RowBytes(at, s.cols);
  std::vector<uint8_t> xq(xb * n_tokens);
  for (int t = 0; t < n_tokens; ++t) {
    for (float& f : rowf) f = u(rng);
    QuantizeActivations(at, rowf.data(), xq.data() + t * xb, s.cols);
  }
  std::vector<float> y(static_cast<size_t>(s.rows) * n_tokens * pool.size());

  size_t calls = 0;
  const double t0 = Now();
  double t1 = t0;
  while (t1 - t0 < seconds || calls < copies) {
    const MatrixView mv{
        s.type,    s.rows,
        s.cols,    w + (calls % copies) * mat_bytes,
        row_bytes, interleaved ? WeightLayout::kInterleaved16 : WeightLayout::kRows};
    pool.Run([&](int i) {
      if (teams) {
        MatMulQuantized(mv, at, xq.data(), xb, n_tokens, 0, s.rows,
                        y.data() + i * s.rows * n_tokens, s.rows);
        return;
      }
      int64_t r0, r1;
      ThreadPool::Split(s.rows, pool.size(), i, 16, &r0, &r1);
      MatMulQuantized(mv, at, xq.data(), xb, n_tokens, r0, r1, y.data(), s.rows);
    });
    ++calls;
    if ((calls & 15) == 0) t1 = Now();
  }
  t1 = Now();
  std::free(w);
  const double dt = (t1 - t0) / static_cast<double>(calls);
  const double work = teams ? pool.size() : 1;  // token sets multiplied per call
  return {static_cast<double>(mat_bytes) / dt / 1e9,
          2.0 * work * static_cast<double>(s.rows) * s.cols * n_tokens / dt / 1e9};
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  const std::string filter = argc > 2 ? argv[2] : "";
  if (argc > 3) g_working_set = static_cast<size_t>(std::max(1, std::atoi(argv[3]))) << 20;
  const Shape shapes[] = {
      {"q4_1 576x576 (attn_q/o)", DType::kQ4_1, 576, 576},
      {"q4_1 576x192 (attn_k/v)", DType::kQ4_1, 576, 192},
      {"q4_1 576x1536 (ffn_gate/up)", DType::kQ4_1, 576, 1536},
      {"q4_1 1536x576 (ffn_down)", DType::kQ4_1, 1536, 576},
      {"q8_0 576x49152 (output head)", DType::kQ8_0, 576, 49152},
      {"q8_0 576x1024 (head rows)", DType::kQ8_0, 576, 1024},
  };
  std::printf("kernel ISA: %s\n", KernelIsa());
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    const double bw = MeasureReadBandwidth(pool, size_t{512} << 20, 5) / 1e9;
    const double peak = MeasureInt8DotPeak(pool, 0.2, 3) / 1e9;
    std::printf(
        "\nthreads=%d  measured read bandwidth (512 MiB, best of 5): %.1f GB/s; int8 dot peak %.0f "
        "GOP/s\n",
        threads, bw, peak);
    std::printf("%-30s %6s %12s %8s %10s %10s %10s %10s\n", "shape (cols x rows)", "act", "layout",
                "n_tok", "GB/s", "GFLOP/s", "GB/s / bw", "of peak");
    for (const Shape& s : shapes) {
      if (std::string(s.name).find(filter) == std::string::npos) continue;
      for (int n_tokens : {1, 8, 16}) {
        for (bool inter : {false, true}) {
          for (ActPrecision p : {ActPrecision::kInt8, ActPrecision::kSplit16}) {
            const Result r = Bench(pool, s, n_tokens, p, seconds, inter);
            std::printf("%-30s %6s %12s %8d %10.1f %10.1f %9.0f%% %9.0f%%\n", s.name,
                        p == ActPrecision::kInt8 ? "int8" : "split16",
                        inter ? "interleaved" : "rows", n_tokens, r.gbps, r.gflops,
                        100.0 * r.gbps / bw, 100.0 * r.gflops / peak);
          }
          if (inter && n_tokens == 8 && threads > 1) {  // teams: weights read by every thread
            const Result r = Bench(pool, s, n_tokens, ActPrecision::kInt8, seconds, true, true);
            std::printf("%-30s %6s %12s %8s %10.1f %10.1f %9.0f%% %9.0f%%\n", s.name, "int8",
                        "inter/teams", "8/thread", r.gbps, r.gflops, 100.0 * r.gbps / bw,
                        100.0 * r.gflops / peak);
          }
        }
      }
    }
  }
  return 0;
}
