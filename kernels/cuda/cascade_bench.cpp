// Times the shared-prefix attention of one decode step, one layer: M
// sequences over one P-key prefix, each with `own` keys after it.
//   full      DecodeAttention over each sequence's P + own keys (no cascade)
//   cascade   CascadeAttention over the prefix for every member at once
//             (for each count of key ranges), then DecodeAttention over
//             the own keys merging those ranges
//   bare      DecodeAttention over `own` keys with no prefix at all (the
//             step the cascade aims to cost as little more than)
// Prints microseconds per launch (CUDA events over --reps launches), the
// prefix's bytes and products per second, and the largest difference
// between the cascade's output and the full attention's. Exits 77 without
// a GPU.
//   cascade_bench [--members 64] [--group 4] [--kv 8] [--hd 128]
//                 [--prefix 4096] [--own 160] [--bs 16] [--ranges 1,4,9,16]
//                 [--reps 50]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device_copy.h"
#include "kernels/cuda_ops.h"
#include "kernels/dtype.h"

using namespace braid::kernels;
using braid::kernels::cuda_test::ToDevice;

namespace {

std::vector<int> ParseList(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

void Check(int e, const char* what) {
  const cudaError_t c = cudaDeviceSynchronize();
  if (e != 0 || c != cudaSuccess) {
    std::fprintf(stderr, "%s failed: %d %s\n", what, e, cudaGetErrorString(c));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_test::HaveGpu()) return cuda_test::kNoGpu;
  int M = 64, G = 4, n_kv = 8, hd = 128, P = 4096, own = 160, bs = 16, reps = 50;
  std::vector<int> range_counts = {1, 4, 9, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--members")
      M = v;
    else if (k == "--group")
      G = v;
    else if (k == "--kv")
      n_kv = v;
    else if (k == "--hd")
      hd = v;
    else if (k == "--prefix")
      P = v;
    else if (k == "--own")
      own = v;
    else if (k == "--bs")
      bs = v;
    else if (k == "--reps")
      reps = v;
    else if (k == "--ranges")
      range_counts = ParseList(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (P % bs != 0) {
    std::fprintf(stderr, "--prefix must be a multiple of --bs\n");
    return 2;
  }
  const int n_head = G * n_kv, q_dim = n_head * hd;
  const int prefix_blocks = P / bs, own_blocks = (own + bs - 1) / bs;
  const int n_blocks = prefix_blocks + M * own_blocks;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device %s, %d SMs; members %d, group %d, kv heads %d, hd %d, prefix %d, own %d\n",
              prop.name, prop.multiProcessorCount, M, G, n_kv, hd, P, own);

  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t cache = static_cast<size_t>(n_blocks) * n_kv * bs * hd;
  std::vector<uint16_t> k(cache), v(cache);
  for (size_t i = 0; i < cache; ++i) k[i] = Fp32ToBf16(nd(rng)), v[i] = Fp32ToBf16(nd(rng));
  std::vector<float> q(static_cast<size_t>(M) * q_dim);
  for (float& x : q) x = nd(rng);
  // Tables: member i's prefix blocks (shared) then its own; the bare tables
  // hold only the own blocks.
  std::vector<int32_t> tables, bare_tables, seq_table(M), bare_seq_table(M), list(M), tok_seq(M),
      pos(M), bare_pos(M), start(M, P);
  for (int i = 0; i < M; ++i) {
    seq_table[i] = static_cast<int32_t>(tables.size());
    bare_seq_table[i] = static_cast<int32_t>(bare_tables.size());
    for (int b = 0; b < prefix_blocks; ++b) tables.push_back(b);
    for (int b = 0; b < own_blocks; ++b) {
      tables.push_back(prefix_blocks + i * own_blocks + b);
      bare_tables.push_back(prefix_blocks + i * own_blocks + b);
    }
    list[i] = tok_seq[i] = i;
    pos[i] = P + own - 1;
    bare_pos[i] = own - 1;
  }
  uint16_t *dk = ToDevice(k), *dv = ToDevice(v);
  float* dq = ToDevice(q);
  int32_t *d_tables = ToDevice(tables), *d_bare_tables = ToDevice(bare_tables);
  int32_t *d_seq_table = ToDevice(seq_table), *d_bare_seq_table = ToDevice(bare_seq_table);
  int32_t *d_list = ToDevice(list), *d_tok_seq = ToDevice(tok_seq), *d_pos = ToDevice(pos);
  int32_t *d_bare_pos = ToDevice(bare_pos), *d_start = ToDevice(start);
  uint16_t *d_out = nullptr, *d_full = nullptr;
  cudaMalloc(&d_out, static_cast<size_t>(M) * q_dim * 2);
  cudaMalloc(&d_full, static_cast<size_t>(M) * q_dim * 2);
  float *d_part = nullptr, *d_ranges = nullptr;
  cudaMalloc(&d_part, static_cast<size_t>(M) * n_head * 32 * (hd + 2) * sizeof(float));
  cudaMalloc(&d_ranges,
             static_cast<size_t>(M) * n_head * cuda::kMaxPrefixRanges * (hd + 2) * sizeof(float));
  int* d_counters = nullptr;
  cudaMalloc(&d_counters, static_cast<size_t>(M) * n_kv * sizeof(int));
  cudaMemset(d_counters, 0, static_cast<size_t>(M) * n_kv * sizeof(int));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto time_us = [&](auto&& launch) {
    launch();  // warm
    cudaDeviceSynchronize();
    cudaEventRecord(e0);
    for (int r = 0; r < reps; ++r) launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    return 1e3 * ms / reps;
  };

  cuda::DecodeAttentionArgs a;
  a.q = dq, a.k_cache = dk, a.v_cache = dv, a.tokens = d_list, a.pos = d_pos, a.tok_seq = d_tok_seq;
  a.seq_table = d_seq_table, a.tables = d_tables, a.out = d_full, a.partial = d_part;
  a.counters = d_counters, a.n = M, a.n_head = n_head, a.n_kv = n_kv, a.head_dim = hd;
  a.block_size = bs, a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Splits as the backend picks them: enough blocks to fill the device twice.
  auto splits = [&](int keys) {
    const int want = (2 * prop.multiProcessorCount + M * n_kv - 1) / (M * n_kv);
    return std::max(1, std::min({32, want, std::max(1, keys / 64)}));
  };
  a.n_split = splits(P + own);
  const double full_us = time_us([&] { Check(cuda::DecodeAttention(a, nullptr), "full"); });
  cuda::DecodeAttentionArgs bare = a;
  bare.pos = d_bare_pos, bare.tables = d_bare_tables, bare.seq_table = d_bare_seq_table;
  bare.out = d_out, bare.n_split = splits(own);
  const double bare_us = time_us([&] { Check(cuda::DecodeAttention(bare, nullptr), "bare"); });
  const double prefix_bytes = 2.0 * P * n_kv * hd * sizeof(uint16_t);
  // Products of the prefix: Q K^T and P V, 2 flops a multiply-add.
  const double prefix_flops = 4.0 * M * n_head * static_cast<double>(P) * hd;
  std::printf("resident CascadeAttention blocks per SM: %d\n",
              cuda::CascadeAttentionBlocksPerSm(hd));
  std::printf("full   %8.1f us   split %d\n", full_us, a.n_split);
  std::printf("bare   %8.1f us   split %d\n", bare_us, bare.n_split);

  std::vector<uint16_t> full_h(static_cast<size_t>(M) * q_dim), got_h(full_h.size());
  cudaMemcpy(full_h.data(), d_full, full_h.size() * 2, cudaMemcpyDeviceToHost);
  const std::vector<int32_t> groups = {0, M, P, 0};
  int32_t* d_groups = ToDevice(groups);
  for (int R : range_counts) {
    std::vector<int32_t> work;
    for (int rb = 0; rb * cuda::kCascadeBlockRows < M * G; ++rb)
      for (int r = 0; r < R; ++r) work.push_back(rb << 4 | r);
    int32_t* d_work = ToDevice(work);
    cuda::CascadeAttentionArgs ca;
    ca.q = dq, ca.k_cache = dk, ca.v_cache = dv, ca.tables = d_tables, ca.seq_table = d_seq_table;
    ca.groups = d_groups, ca.work = d_work, ca.rows = d_list, ca.index = d_list;
    ca.prefix = d_ranges, ca.n_work = static_cast<int>(work.size()), ca.n_head = n_head;
    ca.n_kv = n_kv, ca.head_dim = hd, ca.block_size = bs, ca.n_ranges = R, ca.scale = a.scale;
    cuda::DecodeAttentionArgs own_args = a;
    own_args.out = d_out, own_args.key_start = d_start, own_args.prefix = d_ranges;
    own_args.prefix_ranges = R, own_args.n_split = splits(own);
    const double cas_us = time_us([&] { Check(cuda::CascadeAttention(ca, nullptr), "cascade"); });
    const double own_us =
        time_us([&] { Check(cuda::DecodeAttention(own_args, nullptr), "own keys"); });
    cudaMemcpy(got_h.data(), d_out, got_h.size() * 2, cudaMemcpyDeviceToHost);
    float worst = 0;
    for (size_t i = 0; i < got_h.size(); ++i)
      worst = std::max(worst, std::fabs(Bf16ToFp32(got_h[i]) - Bf16ToFp32(full_h[i])));
    std::printf(
        "ranges %2d: cascade %8.1f us (%zu blocks, %6.0f GB/s of prefix, "
        "%5.1f "
        "TFLOP/s), own keys "
        "+ merge %6.1f us, sum %8.1f us = %.2fx bare; max |cascade - full| %.2e\n",
        R, cas_us, work.size() * n_kv, prefix_bytes / cas_us / 1e3, prefix_flops / cas_us / 1e6,
        own_us, cas_us + own_us, (cas_us + own_us) / bare_us, worst);
    cudaFree(d_work);
  }
  return 0;
}
