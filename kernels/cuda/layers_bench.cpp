// Times DecodeLayers (a one-token step's layers in one launch) on the
// Llama-3.2-1B and Llama-3-8B shapes (random weights, a context of --pos
// keys), as it runs and with no phase waiting for another (the weights'
// stream alone: DecodeLayersArgs::no_waits), for several ring depths, and
// with attention in one range a KV head, and with the products on tensor
// cores (DecodeLayersArgs::tensor_cores, "tc"). Prints microseconds per step, the
// layers' weights read per second and its share of the device-to-device
// copy rate measured in the same run (bytes read and written over the
// copy's time, as the engine's roofline counts it), and for each
// configuration at full depth a trace of one launch: the time between the
// kernel's marks (DecodeLayersArgs::trace). Exits 77 without a GPU.
//   layers_bench [--reps 20] [--pos 200]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device_copy.h"
#include "kernels/cuda_ops.h"

using namespace braid::kernels::cuda;
using braid::kernels::cuda_test::Check;
using braid::kernels::cuda_test::CopyRate;
using braid::kernels::cuda_test::Noise;

namespace {

struct Shape {
  const char* name;
  int d, n_head, n_kv, hd, n_ff, n_layer;
};

// Where a traced launch's layers went: per interval between marks, the
// mean over layers (the first left out) of the mean and the largest over
// blocks, and the span of a layer over all blocks.
void PrintTrace(const int64_t* trace, int n_layer, int sms) {
  static const char* kInterval[kDecodeLayersMarks - 1] = {
      "wait down", "norm", "Q/K/V",   "wait Q/K/V", "attend",       "merge",
      "wait att",  "Wo",   "wait Wo", "gate/up",    "wait gate/up", "down"};
  const size_t marks = static_cast<size_t>(n_layer) * kDecodeLayersMarks * sms;
  std::vector<int64_t> t(marks);
  Check(cudaMemcpy(t.data(), trace, marks * sizeof(int64_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
  auto at = [&](int l, int m, int b) {
    return t[(static_cast<size_t>(l) * kDecodeLayersMarks + m) * sms + b];
  };
  std::printf("  trace, us mean/most over blocks:");
  for (int m = 0; m + 1 < kDecodeLayersMarks; ++m) {
    double mean = 0, most = 0;
    for (int l = 1; l < n_layer; ++l) {
      double sum = 0, mx = 0;
      for (int b = 0; b < sms; ++b) {
        const double d = 1e-3 * static_cast<double>(at(l, m + 1, b) - at(l, m, b));
        sum += d;
        mx = std::max(mx, d);
      }
      mean += sum / sms;
      most += mx;
    }
    std::printf(" %s %.1f/%.1f;", kInterval[m], mean / (n_layer - 1), most / (n_layer - 1));
  }
  double layer = 0;
  for (int l = 1; l < n_layer; ++l) {
    int64_t first = at(l, 0, 0), last = at(l, kDecodeLayersMarks - 1, 0);
    for (int b = 1; b < sms; ++b) {
      first = std::min(first, at(l, 0, b));
      last = std::max(last, at(l, kDecodeLayersMarks - 1, b));
    }
    layer += 1e-3 * static_cast<double>(last - first);
  }
  std::printf(" a layer %.1f\n", layer / (n_layer - 1));
}

void Run(const Shape& s, int reps, int pos, double copy) {
  const int q_dim = s.n_head * s.hd, kv_dim = s.n_kv * s.hd, width = q_dim + 2 * kv_dim;
  const int bs = 16, blocks = (pos + 1 + bs - 1) / bs;
  const size_t layer_bytes =
      2 * (static_cast<size_t>(width) * s.d + static_cast<size_t>(s.d) * q_dim +
           2 * static_cast<size_t>(s.n_ff) * s.d + static_cast<size_t>(s.d) * s.n_ff);
  std::vector<DecodeLayer> layers(s.n_layer);
  std::vector<void*> owned;
  for (int l = 0; l < s.n_layer; ++l) {
    DecodeLayer& L = layers[l];
    auto w = [&](size_t n) {  // small constant weights: the time does not depend on the values
      void* p = nullptr;
      Check(cudaMalloc(&p, 2 * n), "cudaMalloc");
      Check(cudaMemset(p, 0x3b, 2 * n), "cudaMemset");
      owned.push_back(p);
      return static_cast<const uint16_t*>(p);
    };
    L.wqkv = w(static_cast<size_t>(width) * s.d);
    L.wo = w(static_cast<size_t>(s.d) * q_dim);
    L.wgu = w(2 * static_cast<size_t>(s.n_ff) * s.d);
    L.wdown = w(static_cast<size_t>(s.d) * s.n_ff);
    std::vector<float> ones(s.d, 1.0f);
    L.attn_norm = braid::kernels::cuda_test::ToDevice(ones);
    L.ffn_norm = braid::kernels::cuda_test::ToDevice(ones);
    owned.push_back(const_cast<float*>(L.attn_norm));
    owned.push_back(const_cast<float*>(L.ffn_norm));
    L.k_cache = Noise(2 * static_cast<size_t>(blocks) * bs * kv_dim, 3);
    L.v_cache = Noise(2 * static_cast<size_t>(blocks) * bs * kv_dim, 4);
    owned.push_back(L.k_cache);
    owned.push_back(L.v_cache);
  }
  std::vector<int32_t> table(blocks);
  for (int i = 0; i < blocks; ++i) table[i] = i;
  std::vector<float> inv(s.hd / 2), x(s.d, 0.5f);
  for (int i = 0; i < s.hd / 2; ++i) inv[i] = 1.0f / (1.0f + i);
  using braid::kernels::cuda_test::ToDevice;
  DecodeLayersArgs a;
  a.layers = ToDevice(layers);
  a.n_layer = s.n_layer;
  a.x = ToDevice(x);
  Check(cudaMalloc(&a.qkv, width * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&a.att, q_dim * sizeof(uint16_t)), "cudaMalloc");
  Check(cudaMalloc(&a.act, s.n_ff * sizeof(uint16_t)), "cudaMalloc");
  Check(cudaMalloc(&a.partial, static_cast<size_t>(s.n_kv) * kDecodeLayersRanges * q_dim / s.n_kv *
                                   (s.hd + 2) * sizeof(float)),
        "cudaMalloc");
  const int n_counters = DecodeLayersCounters(s.n_layer, s.n_kv);
  Check(cudaMalloc(&a.counters, n_counters * sizeof(int)), "cudaMalloc");
  Check(cudaMemset(a.counters, 0, n_counters * sizeof(int)), "cudaMemset");
  const std::vector<int32_t> zero = {0}, posv = {pos}, slot = {pos};
  a.tokens = ToDevice(zero), a.pos = ToDevice(posv), a.slot = ToDevice(slot);
  a.tok_seq = ToDevice(zero), a.seq_table = ToDevice(zero), a.tables = ToDevice(table);
  a.inv_freq = ToDevice(inv);
  a.d = s.d, a.n_head = s.n_head, a.n_kv = s.n_kv, a.head_dim = s.hd, a.n_rot = s.hd;
  a.n_ff = s.n_ff, a.block_size = bs;
  a.neox = true;
  a.eps = 1e-5f;
  a.scale = 1.0f / 8;
  // Each configuration timed, then one launch of it at full depth traced.
  struct Config {
    const char* name;
    bool no_waits;
    int stages, range_keys = 32;
    bool tensor_cores = false;
  };
  const Config configs[] = {
      {"as it runs", false, 2},
      {"as it runs", false, 4},
      {"as it runs", false, 0},
      {"stream alone", true, 2},
      {"stream alone", true, 4},
      {"stream alone", true, 0},
      {"one range", false, 0, 1 << 20},
      {"tc, as it runs", false, 0, 32, true},
      {"tc, stream alone", true, 0, 32, true},
  };
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t marks = static_cast<size_t>(s.n_layer) * kDecodeLayersMarks * sms;
  int64_t* trace = nullptr;
  Check(cudaMalloc(&trace, marks * sizeof(int64_t)), "cudaMalloc");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (const Config& c : configs) {
    a.no_waits = c.no_waits;
    a.stages = c.stages;
    a.range_keys = c.range_keys;
    a.tensor_cores = c.tensor_cores;
    a.trace = nullptr;
    Check(static_cast<cudaError_t>(DecodeLayers(a, nullptr)), "DecodeLayers");  // warm
    cudaEventRecord(e0);
    for (int r = 0; r < reps; ++r) DecodeLayers(a, nullptr);
    cudaEventRecord(e1);
    Check(cudaEventSynchronize(e1), "DecodeLayers");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    const double us = 1e3 * ms / reps;
    const double rate = static_cast<double>(layer_bytes) * s.n_layer / (us * 1e-6);
    std::printf(
        "%-8s %-16s stages %-4s %9.1f us a step, layers' weights at %7.1f GB/s, %5.1f%% of "
        "copy\n",
        s.name, c.name, c.stages ? std::to_string(c.stages).c_str() : "max", us, rate / 1e9,
        100 * rate / copy);
    if (c.stages != 0) continue;
    a.trace = trace;
    Check(static_cast<cudaError_t>(DecodeLayers(a, nullptr)), "DecodeLayers");
    PrintTrace(trace, s.n_layer, sms);
  }
  cudaFree(trace);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  for (void* p : owned) cudaFree(p);
  braid::kernels::cuda_test::FreeAll({a.layers, a.x, a.qkv, a.att, a.act, a.partial, a.counters,
                                      a.tokens, a.pos, a.slot, a.tok_seq, a.seq_table, a.tables,
                                      a.inv_freq});
}

}  // namespace

int main(int argc, char** argv) {
  if (!braid::kernels::cuda_test::HaveGpu()) return braid::kernels::cuda_test::kNoGpu;
  int reps = 20, pos = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--pos")) pos = std::atoi(argv[i + 1]);
  }
  const double copy = CopyRate();
  std::printf("copy %.1f GB/s\n", copy / 1e9);
  Run({"llama1b", 2048, 32, 8, 64, 8192, 16}, reps, pos, copy);
  Run({"llama8b", 4096, 32, 8, 128, 14336, 32}, reps, pos, copy);
  return 0;
}
