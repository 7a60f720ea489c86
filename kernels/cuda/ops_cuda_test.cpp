// The CUDA backend's kernels (kernels/cuda_ops.h) against plain fp32 loops
// on fresh random inputs. Exits 77 ("skipped: no GPU", CTest
// SKIP_RETURN_CODE) without a device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "device_copy.h"
#include "kernels/cuda_ops.h"
#include "kernels/dtype.h"

using namespace braid::kernels;
using braid::kernels::cuda_test::ToDevice;
using braid::kernels::cuda_test::ToHost;

namespace {

int failures = 0;
std::mt19937 rng(17);

std::vector<float> Random(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> Bf16ToHost(const uint16_t* d, size_t n) {
  std::vector<uint16_t> h = ToHost(d, n);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = Bf16ToFp32(h[i]);
  return f;
}

std::vector<float> Fp8ToHost(const uint8_t* d, size_t n) {
  std::vector<uint8_t> h = ToHost(d, n);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = Fp8E4M3ToFp32(h[i]);
  return f;
}
// A KV cache's n elements (bf16 or e4m3) as floats.
std::vector<float> CacheToHost(const void* d, size_t n, cuda::KvCache c) {
  return c == cuda::KvCache::kE4m3 ? Fp8ToHost(static_cast<const uint8_t*>(d), n)
                                   : Bf16ToHost(static_cast<const uint16_t*>(d), n);
}
// Tolerances of a value stored in a KV cache: bf16's, or e4m3's (rounded to
// nearest: within half a step, 1/16 of the value, or 2^-10 below 2^-6): an
// absolute 1e-3 and this relative one.
float CacheRtol(cuda::KvCache c) { return c == cuda::KvCache::kE4m3 ? 0.0626f : 8e-3f; }

// |got - want| <= atol + rtol * |want| everywhere.
void Expect(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
            float atol, float rtol) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double excess = std::fabs(got[i] - want[i]) - (atol + rtol * std::fabs(want[i]));
    if (!(excess <= worst)) {
      worst = std::isnan(excess) ? INFINITY : excess;
      at = i;
    }
  }
  if (worst > 0) {
    ++failures;
    std::printf("FAIL %s: element %zu is %g, expected %g\n", what.c_str(), at, got[at], want[at]);
  } else {
    std::printf("ok   %s\n", what.c_str());
  }
}

// dim 300 takes the kernel's path of 16-byte pieces, 301 the one of single values.
void TestRmsNorm(int dim) {
  const int n = 5;
  auto x = Random(n * dim), w = Random(dim);
  std::vector<int32_t> rows = {4, 0, 2};
  float* dx = ToDevice(x);
  float* dw = ToDevice(w);
  int32_t* dr = ToDevice(rows);
  uint16_t* out = nullptr;
  cudaMalloc(&out, n * dim * sizeof(uint16_t));
  cuda::RmsNorm(dx, dw, dr, 3, dim, 1e-5f, out, nullptr);
  std::vector<float> want;
  for (int r : rows) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + 1e-5f);
    for (int i = 0; i < dim; ++i) want.push_back(x[r * dim + i] * inv * w[i]);
  }
  Expect("rms norm (row list), dim " + std::to_string(dim), Bf16ToHost(out, want.size()), want,
         1e-3f, 8e-3f);
  cudaFree(dx), cudaFree(dw), cudaFree(dr), cudaFree(out);
}

float Silu(float g) { return g / (1 + std::exp(-g)); }
float GeluTanh(float g) {
  const double x = g;
  return static_cast<float>(0.5 * x *
                            (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))));
}

// An even width takes two pairs a thread, an odd one one.
void TestGatedActivation(int ff) {
  const int n = 3;
  auto gu = Random(n * 2 * ff, 2.0f);
  float* d = ToDevice(gu);
  uint16_t* out = nullptr;
  cudaMalloc(&out, n * ff * sizeof(uint16_t));
  for (cuda::Gate gate : {cuda::Gate::kSilu, cuda::Gate::kGeluTanh}) {
    const int e = cuda::GatedActivation(d, n, ff, gate, out, nullptr);
    failures += e != 0;
    std::vector<float> want;
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < ff; ++j) {
        const float g = gu[t * 2 * ff + 2 * j], u = gu[t * 2 * ff + 2 * j + 1];
        want.push_back((gate == cuda::Gate::kSilu ? Silu(g) : GeluTanh(g)) * u);
      }
    Expect(std::string(gate == cuda::Gate::kSilu ? "swiglu" : "geglu (tanh)") + ", width " +
               std::to_string(ff),
           Bf16ToHost(out, want.size()), want, 1e-3f, 8e-3f);
  }
  cudaFree(d), cudaFree(out);
}

void TestRmsNormAdd() {
  const int n = 4, dim = 640;
  auto y = Random(n * dim, 3.0f), w = Random(dim), x = Random(n * dim);
  float *dy = ToDevice(y), *dw = ToDevice(w), *dx = ToDevice(x);
  const int e = cuda::RmsNormAdd(dy, dw, n, dim, 1e-6f, dx, nullptr);
  failures += e != 0;
  std::vector<float> want = x;
  for (int r = 0; r < n; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += static_cast<double>(y[r * dim + i]) * y[r * dim + i];
    const double inv = 1 / std::sqrt(ss / dim + 1e-6);
    for (int i = 0; i < dim; ++i)
      want[r * dim + i] += static_cast<float>(y[r * dim + i] * inv * w[i]);
  }
  Expect("rms norm added to the residual", ToHost(dx, want.size()), want, 1e-5f, 1e-5f);
  cudaFree(dy), cudaFree(dw), cudaFree(dx);
}

// The prefill path's causal softmax with a sliding window, and the gather
// of a key range that starts past the first block.
void TestWindowedPrefill() {
  const int rows = 2 * 3, n = 3, K = 40, key0 = 30, window = 7;  // 2 heads of 3 rows
  std::vector<float> sc = Random(static_cast<size_t>(rows) * K, 2.0f);
  float* ds = ToDevice(sc);
  uint16_t* dp = nullptr;
  cudaMalloc(&dp, static_cast<size_t>(rows) * K * sizeof(uint16_t));
  const int e = cuda::CausalSoftmax(ds, rows, n, K, key0, window, dp, nullptr);
  failures += e != 0;
  std::vector<float> want(static_cast<size_t>(rows) * K, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const int last = key0 + r % n, first = std::max(0, last - window + 1);
    double mx = -1e300, sum = 0;
    for (int k = first; k <= last; ++k) mx = std::max(mx, static_cast<double>(sc[r * K + k]));
    for (int k = first; k <= last; ++k) sum += std::exp(sc[r * K + k] - mx);
    for (int k = first; k <= last; ++k)
      want[r * K + k] = static_cast<float>(std::exp(sc[r * K + k] - mx) / sum);
  }
  Expect("causal softmax in a window", Bf16ToHost(dp, want.size()), want, 1e-4f, 8e-3f);

  // Keys [21, 50) of a sequence in blocks {5, 2, 7, 0} of 16 (n_kv 2, hd 32);
  // its first block is not readable (-1), as a block dropped out of every window.
  const int bs = 16, n_kv = 2, hd = 32, from = 21, count = 29;
  const std::vector<int32_t> table = {-1, 2, 7, 0};
  const size_t cache = static_cast<size_t>(8) * n_kv * bs * hd;
  std::vector<uint16_t> kh(cache), vh(cache);
  for (size_t i = 0; i < cache; ++i)
    kh[i] = Fp32ToBf16(static_cast<float>(i % 977)),
    vh[i] = Fp32ToBf16(-static_cast<float>(i % 991));
  uint16_t *dk = ToDevice(kh), *dv = ToDevice(vh), *kc = nullptr, *vc = nullptr;
  int32_t* dt = ToDevice(table);
  cudaMalloc(&kc, static_cast<size_t>(n_kv) * count * hd * sizeof(uint16_t));
  cudaMalloc(&vc, static_cast<size_t>(n_kv) * count * hd * sizeof(uint16_t));
  const int e2 =
      cuda::GatherKv(dk, dv, cuda::KvCache::kBf16, dt, from, count, n_kv, hd, bs, kc, vc, nullptr);
  failures += e2 != 0;
  // The gathered rows' values, cache element `at` read by value(at).
  auto gathered = [&](auto value) {
    std::vector<float> w;
    for (int g = 0; g < n_kv; ++g)
      for (int i = 0; i < count; ++i)
        for (int d = 0; d < hd; ++d) {
          const int key = from + i;
          w.push_back(
              value(((static_cast<size_t>(table[key / bs]) * n_kv + g) * bs + key % bs) * hd + d));
        }
    return w;
  };
  const auto kw = gathered([&](size_t at) { return Bf16ToFp32(kh[at]); });
  const auto vw = gathered([&](size_t at) { return Bf16ToFp32(vh[at]); });
  Expect("gather of keys from a later block (K)", Bf16ToHost(kc, kw.size()), kw, 0, 0);
  Expect("gather of keys from a later block (V)", Bf16ToHost(vc, vw.size()), vw, 0, 0);
  // The same from an e4m3 cache: every byte but NaN's, read back exactly.
  {
    std::vector<uint8_t> k8(cache), v8(cache);
    for (size_t i = 0; i < cache; ++i)
      k8[i] = static_cast<uint8_t>(i % 127), v8[i] = static_cast<uint8_t>(128 + i % 127);
    uint8_t *dk8 = ToDevice(k8), *dv8 = ToDevice(v8);
    failures += cuda::GatherKv(dk8, dv8, cuda::KvCache::kE4m3, dt, from, count, n_kv, hd, bs, kc,
                               vc, nullptr) != 0;
    const auto k8w = gathered([&](size_t at) { return Fp8E4M3ToFp32(k8[at]); });
    const auto v8w = gathered([&](size_t at) { return Fp8E4M3ToFp32(v8[at]); });
    Expect("gather of e4m3 keys (K)", Bf16ToHost(kc, k8w.size()), k8w, 0, 0);
    Expect("gather of e4m3 keys (V)", Bf16ToHost(vc, v8w.size()), v8w, 0, 0);
    cudaFree(dk8), cudaFree(dv8);
  }
  for (void* p : {static_cast<void*>(ds), static_cast<void*>(dp), static_cast<void*>(dk),
                  static_cast<void*>(dv), static_cast<void*>(dt), static_cast<void*>(kc),
                  static_cast<void*>(vc)})
    cudaFree(p);
}

// RoPE + KV store, then decode attention over the stored cache, for one
// shape; the reference rotates and attends in fp32 over bf16-rounded K/V.
// With qk_norm, QkNorm normalizes Q's and K's heads (adding the bias) first;
// with a window, each token attends its last `window` positions only.
void TestAttention(int hd, int n_head, int n_kv, bool neox, bool bias, int n_split,
                   int keys_in_flight = 4, bool qk_norm = false, int window = 0,
                   int range_keys = 64, cuda::KvCache kv = cuda::KvCache::kBf16) {
  const int bs = 16, n_rot = hd;
  const std::vector<int> lens = {1, 37, 300};  // sequence lengths
  const int S = static_cast<int>(lens.size());
  // Block tables: a shuffled pool of blocks.
  int blocks = 0;
  for (int l : lens) blocks += (l + bs - 1) / bs;
  std::vector<int32_t> perm(blocks);
  for (int i = 0; i < blocks; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables, seq_table;
  int used = 0;
  for (int l : lens) {
    seq_table.push_back(static_cast<int32_t>(tables.size()));
    for (int b = 0; b < (l + bs - 1) / bs; ++b) tables.push_back(perm[used++]);
  }
  // Every position of every sequence is one token of the batch.
  std::vector<int32_t> pos, slot, tok_seq;
  for (int s = 0; s < S; ++s)
    for (int p = 0; p < lens[s]; ++p) {
      pos.push_back(p);
      slot.push_back(tables[seq_table[s] + p / bs] * bs + p % bs);
      tok_seq.push_back(s);
    }
  const int T = static_cast<int>(pos.size());
  const int q_dim = n_head * hd, kv_dim = n_kv * hd, width = q_dim + 2 * kv_dim;
  auto qkv = Random(static_cast<size_t>(T) * width);
  auto b = bias ? Random(width, 0.5f) : std::vector<float>();
  std::vector<float> inv_freq(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / n_rot);

  const std::vector<float> q_norm = Random(hd, 1.0f), k_norm = Random(hd, 1.0f);
  float* d_qkv = ToDevice(qkv);
  float* d_b = bias ? ToDevice(b) : nullptr;
  if (qk_norm) {
    float *dqn = ToDevice(q_norm), *dkn = ToDevice(k_norm);
    const int e = cuda::QkNorm(d_qkv, d_b, dqn, dkn, T, n_head, n_kv, hd, 1e-6f, nullptr);
    failures += e != 0;
    cudaDeviceSynchronize();
    cudaFree(dqn), cudaFree(dkn);
  }
  int32_t *d_pos = ToDevice(pos), *d_slot = ToDevice(slot), *d_seq = ToDevice(tok_seq);
  int32_t *d_tables = ToDevice(tables), *d_seq_table = ToDevice(seq_table);
  float* d_inv = ToDevice(inv_freq);
  float* d_q = nullptr;
  void *d_k = nullptr, *d_v = nullptr;
  uint16_t* d_out = nullptr;
  float* d_part = nullptr;
  int32_t* d_counters = nullptr;
  const size_t cache = static_cast<size_t>(blocks) * bs * kv_dim;
  cudaMalloc(&d_q, static_cast<size_t>(T) * q_dim * sizeof(float));
  cudaMalloc(&d_k, cache * cuda::KvCacheBytes(kv));
  cudaMalloc(&d_v, cache * cuda::KvCacheBytes(kv));
  cudaMalloc(&d_out, static_cast<size_t>(T) * q_dim * sizeof(uint16_t));
  cudaMalloc(&d_part, static_cast<size_t>(T) * n_head * n_split * (hd + 2) * sizeof(float));
  cudaMalloc(&d_counters, static_cast<size_t>(T) * n_kv * sizeof(int32_t));
  cudaMemset(d_counters, 0, static_cast<size_t>(T) * n_kv * sizeof(int32_t));

  cuda::RopeKvArgs r;
  r.qkv = d_qkv, r.bias = qk_norm ? nullptr : d_b, r.pos = d_pos, r.slot = d_slot,
  r.inv_freq = d_inv, r.q = d_q;
  r.k_cache = d_k, r.v_cache = d_v, r.cache = kv;
  r.n = T, r.n_head = n_head, r.n_kv = n_kv, r.head_dim = hd;
  r.n_rot = n_rot, r.block_size = bs, r.neox = neox;
  cuda::RopeStoreKv(r, nullptr);

  // Reference rotation.
  auto rotate = [&](std::vector<float> x, int p) {
    std::vector<float> y = x;
    for (int i = 0; i < n_rot / 2; ++i) {
      const float a = p * inv_freq[i], c = std::cos(a), s = std::sin(a);
      const int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
      y[i0] = x[i0] * c - x[i1] * s;
      y[i1] = x[i0] * s + x[i1] * c;
    }
    return y;
  };
  auto head = [&](int t, int off) {
    std::vector<float> h(hd);
    for (int d = 0; d < hd; ++d)
      h[d] = qkv[static_cast<size_t>(t) * width + off + d] + (bias ? b[off + d] : 0);
    const std::vector<float>* w = !qk_norm               ? nullptr
                                  : off < q_dim          ? &q_norm
                                  : off < q_dim + kv_dim ? &k_norm
                                                         : nullptr;
    if (w) {
      double ss = 0;
      for (float x : h) ss += static_cast<double>(x) * x;
      const double inv = 1 / std::sqrt(ss / hd + 1e-6);
      for (int d = 0; d < hd; ++d) h[d] = static_cast<float>(h[d] * inv * (*w)[d]);
    }
    return h;
  };
  std::vector<float> q_ref(static_cast<size_t>(T) * q_dim), k_ref(cache), v_ref(cache);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < n_head; ++h) {
      auto y = rotate(head(t, h * hd), pos[t]);
      std::copy(y.begin(), y.end(), q_ref.begin() + static_cast<size_t>(t) * q_dim + h * hd);
    }
    const int blk = slot[t] / bs, s = slot[t] % bs;
    for (int g = 0; g < n_kv; ++g) {
      auto k = rotate(head(t, q_dim + g * hd), pos[t]);
      auto v = head(t, q_dim + kv_dim + g * hd);
      for (int d = 0; d < hd; ++d) {
        const size_t at = ((static_cast<size_t>(blk) * n_kv + g) * bs + s) * hd + d;
        k_ref[at] = k[d];
        v_ref[at] = v[d];
      }
    }
  }
  const std::string shape = "hd " + std::to_string(hd) + ", heads " + std::to_string(n_head) + "/" +
                            std::to_string(n_kv) + (neox ? ", neox" : ", pairs") +
                            (bias ? ", bias" : "") + (qk_norm ? ", qk norm" : "") +
                            (window ? ", window " + std::to_string(window) : "") + ", split " +
                            std::to_string(n_split) + " (ranges of " + std::to_string(range_keys) +
                            "+), keys " + std::to_string(keys_in_flight) +
                            (kv == cuda::KvCache::kE4m3 ? ", e4m3 cache" : "");
  Expect("rope q (" + shape + ")", ToHost(d_q, q_ref.size()), q_ref, 2e-4f, 2e-4f);
  Expect("rope k store (" + shape + ")", CacheToHost(d_k, cache, kv), k_ref, 1e-3f, CacheRtol(kv));
  Expect("v store (" + shape + ")", CacheToHost(d_v, cache, kv), v_ref, 1e-3f, CacheRtol(kv));

  // Attention for every token over its own positions [0, pos].
  std::vector<int32_t> list(T);
  for (int t = 0; t < T; ++t) list[t] = t;
  int32_t* d_list = ToDevice(list);
  // The tensor-core kernel (where the shape allows it) and the CUDA-core one.
  for (bool tc : {true, false}) {
    const std::string name = shape + (tc ? ", tensor cores" : ", CUDA cores");
    cuda::DecodeAttentionArgs a;
    a.q = d_q, a.k_cache = d_k, a.v_cache = d_v, a.cache = kv, a.tokens = d_list, a.pos = d_pos,
    a.tok_seq = d_seq;
    a.seq_table = d_seq_table, a.tables = d_tables, a.out = d_out, a.partial = d_part, a.n = T;
    a.counters = d_counters;
    a.n_head = n_head, a.n_kv = n_kv, a.head_dim = hd, a.block_size = bs, a.n_split = n_split;
    a.keys_in_flight = keys_in_flight;
    a.range_keys = range_keys;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.window = window;
    a.tensor_cores = tc;
    const int e = cuda::DecodeAttention(a, nullptr);
    if (e != 0) {
      ++failures;
      std::printf("FAIL decode attention (%s): launch error %d\n", name.c_str(), e);
    }
    const std::vector<float> k_stored = CacheToHost(d_k, cache, kv),
                             v_stored = CacheToHost(d_v, cache, kv);
    const int G = n_head / n_kv;
    // Token t, head h over its keys [k0, k1), in double: the output into
    // out[0, hd), the log-sum-exp of the scaled scores returned.
    auto reference = [&](int t, int h, int k0, int k1, float* out) {
      const int g = h / G;
      const int* table = &tables[seq_table[tok_seq[t]]];
      auto at = [&](int k) {
        return ((static_cast<size_t>(table[k / bs]) * n_kv + g) * bs + k % bs) * hd;
      };
      std::vector<double> sc(k1 - k0);
      double mx = -1e300;
      for (int k = k0; k < k1; ++k) {
        double dot = 0;
        for (int d = 0; d < hd; ++d)
          dot += q_ref[static_cast<size_t>(t) * q_dim + h * hd + d] * k_stored[at(k) + d];
        sc[k - k0] = dot * a.scale;
        mx = std::max(mx, sc[k - k0]);
      }
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int d = 0; d < hd; ++d) {
        double o = 0;
        for (int k = k0; k < k1; ++k) o += sc[k - k0] * v_stored[at(k) + d];
        out[d] = static_cast<float>(o / sum);
      }
      return static_cast<float>(mx + std::log(sum));
    };
    std::vector<float> want(static_cast<size_t>(T) * q_dim);
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < n_head; ++h)
        reference(t, h, window > 0 ? std::max(0, pos[t] + 1 - window) : 0, pos[t] + 1,
                  &want[static_cast<size_t>(t) * q_dim + h * hd]);
    Expect("decode attention (" + name + ")", Bf16ToHost(d_out, want.size()), want, 2e-3f, 1e-2f);
    if (tc) {
      // The cache is stored and synchronized: every key but each token's
      // last may be loaded before the wait (as a decode pass's are), and
      // the cascade below runs so too.
      cudaMemset(d_out, 0, static_cast<size_t>(T) * q_dim * sizeof(uint16_t));
      a.step_keys = 1;
      const int e1 = cuda::DecodeAttention(a, nullptr);
      if (e1 != 0) {
        ++failures;
        std::printf("FAIL decode attention, earlier keys first (%s): launch error %d\n",
                    name.c_str(), e1);
      }
      Expect("decode attention, earlier keys first (" + name + ")", Bf16ToHost(d_out, want.size()),
             want, 2e-3f, 1e-2f);
    }

    // Cascade: each token's keys before key_start attended elsewhere (here in
    // double on the host), handed over as one range per head (normalized
    // output, log-sum-exp, sum 1), merged by the kernel with its own keys
    // after; the result is the same attention. Token 0 attends none of its
    // own keys. (The backend runs no cascade with a sliding window.)
    if (window == 0) {
      std::vector<int32_t> start(T);
      for (int t = 0; t < T; ++t) start[t] = t == 0 ? pos[t] + 1 : (pos[t] + 1) / 2;
      std::vector<float> ranges(static_cast<size_t>(T) * n_head * (hd + 2));
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < n_head; ++h) {
          float* r = &ranges[(static_cast<size_t>(t) * n_head + h) * (hd + 2)];
          r[hd] = reference(t, h, 0, start[t], r);
          r[hd + 1] = 1.0f;
        }
      int32_t* d_start = ToDevice(start);
      float* d_ranges = ToDevice(ranges);
      cuda::DecodeAttentionArgs c = a;
      c.key_start = d_start;
      c.prefix = d_ranges;
      const int e2 = cuda::DecodeAttention(c, nullptr);
      if (e2 != 0) {
        ++failures;
        std::printf("FAIL cascade decode attention (%s): launch error %d\n", name.c_str(), e2);
      }
      Expect("cascade decode attention (" + name + ")", Bf16ToHost(d_out, want.size()), want, 2e-3f,
             1e-2f);
      cudaFree(d_start), cudaFree(d_ranges);
    }
    // Grouped cascade on tensor cores (CascadeAttention): every token of the
    // longest sequence past its first 40 positions is a member of one group
    // whose prefix is those positions (not a whole number of tiles), split
    // into 3 key ranges; the other tokens attend alone. Same attention.
    if (tc && window == 0 && cuda::CascadeAttentionSupports(hd, n_head / n_kv, bs)) {
      const int prefix = 40, ranges = 3, seq = S - 1;
      std::vector<int32_t> start(T, 0), members;
      for (int t = 0; t < T; ++t)
        if (tok_seq[t] == seq && pos[t] >= prefix) {
          start[t] = prefix;
          members.push_back(t);  // its query row and its index in the list: t
        }
      const int m = static_cast<int>(members.size());
      const std::vector<int32_t> groups = {0, m, prefix, seq};
      int32_t *d_start = ToDevice(start), *d_members = ToDevice(members);
      int32_t* d_groups = ToDevice(groups);
      float* d_ranges = nullptr;
      cudaMalloc(&d_ranges, static_cast<size_t>(T) * n_head * ranges * (hd + 2) * sizeof(float));
      // Without and with idle units (-1) after the real ones, as a graphed
      // step's fixed grid has past its own; the second also loading the
      // prefix's first tiles before the wait (the cache is stored).
      for (int idle : {0, 5}) {
        std::vector<int32_t> work;
        for (int rb = 0; rb * cuda::kCascadeBlockRows < m * (n_head / n_kv); ++rb)
          for (int r = 0; r < ranges; ++r) work.push_back(rb << 4 | r);
        work.insert(work.end(), idle, -1);
        int32_t* d_work = ToDevice(work);
        cuda::CascadeAttentionArgs ca;
        ca.q = d_q, ca.k_cache = d_k, ca.v_cache = d_v, ca.cache = kv, ca.tables = d_tables;
        ca.seq_table = d_seq_table, ca.groups = d_groups, ca.work = d_work, ca.rows = d_members;
        ca.index = d_members, ca.prefix = d_ranges, ca.n_work = static_cast<int>(work.size());
        ca.n_head = n_head, ca.n_kv = n_kv, ca.head_dim = hd, ca.block_size = bs;
        ca.n_ranges = ranges, ca.scale = a.scale, ca.early_keys = idle > 0;
        int e3 = cuda::CascadeAttention(ca, nullptr);
        cuda::DecodeAttentionArgs c = a;
        c.key_start = d_start, c.prefix = d_ranges, c.prefix_ranges = ranges;
        e3 = e3 ? e3 : cuda::DecodeAttention(c, nullptr);
        if (e3 != 0) {
          ++failures;
          std::printf("FAIL grouped cascade (%s): launch error %d\n", name.c_str(), e3);
        }
        Expect("grouped cascade decode attention (" + name + ", " + std::to_string(m) +
                   " members, " + std::to_string(idle) + " idle units" +
                   (ca.early_keys ? ", prefix loaded early)" : ")"),
               Bf16ToHost(d_out, want.size()), want, 2e-3f, 1e-2f);
        cudaFree(d_work);
      }
      for (void* p : {static_cast<void*>(d_start), static_cast<void*>(d_members),
                      static_cast<void*>(d_groups), static_cast<void*>(d_ranges)})
        cudaFree(p);
    }

    const std::vector<int32_t> counters = ToHost(d_counters, static_cast<size_t>(T) * n_kv);
    const bool zero =
        std::all_of(counters.begin(), counters.end(), [](int32_t c) { return c == 0; });
    failures += !zero;
    std::printf("%s split counters left at zero (%s)\n", zero ? "ok  " : "FAIL", name.c_str());
  }
  for (void* p :
       {static_cast<void*>(d_qkv), static_cast<void*>(d_b), static_cast<void*>(d_pos),
        static_cast<void*>(d_slot), static_cast<void*>(d_seq), static_cast<void*>(d_tables),
        static_cast<void*>(d_seq_table), static_cast<void*>(d_inv), static_cast<void*>(d_q),
        static_cast<void*>(d_k), static_cast<void*>(d_v), static_cast<void*>(d_out),
        static_cast<void*>(d_part), static_cast<void*>(d_list), static_cast<void*>(d_counters)})
    cudaFree(p);
}

// The matrix-vector kernel for each row count, depth and split of k,
// plain and accumulating, against fp32 loops over the same bf16 inputs.
void TestGemv() {
  // n odd (no multiple of a block's rows for any split); k = 8192 puts 3
  // rows' shared copy of x at exactly 48 KB, the default limit that the
  // kernel's static shared memory then exceeds.
  for (int k : {776, 8192}) {
    const int n = 1003;
    std::vector<float> wf = Random(static_cast<size_t>(n) * k, 0.05f);
    std::vector<uint16_t> w(wf.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = Fp32ToBf16(wf[i]), wf[i] = Bf16ToFp32(w[i]);
    uint16_t* dw = ToDevice(w);
    for (int rows = 1; rows <= cuda::kGemvMaxRows; ++rows)
      for (int depth : {4, 8})
        for (int split : {1, 2, 4})
          for (bool acc : {false, true}) {
            std::vector<float> x = Random(static_cast<size_t>(rows) * k);
            std::vector<uint16_t> xb(x.size());
            for (size_t i = 0; i < x.size(); ++i)
              xb[i] = Fp32ToBf16(x[i]), x[i] = Bf16ToFp32(xb[i]);
            std::vector<float> y0 = Random(static_cast<size_t>(rows) * n);
            std::vector<float> want(static_cast<size_t>(rows) * n);
            for (int m = 0; m < rows; ++m)
              for (int r = 0; r < n; ++r) {
                double d = 0;
                for (int j = 0; j < k; ++j)
                  d += static_cast<double>(wf[static_cast<size_t>(r) * k + j]) * x[m * k + j];
                want[m * n + r] = static_cast<float>(d) + (acc ? y0[m * n + r] : 0.0f);
              }
            uint16_t* dx = ToDevice(xb);
            float* dy = ToDevice(y0);
            cuda::GemvArgs a;
            a.w = dw, a.x = dx, a.y = dy, a.rows = rows, a.n = n, a.k = k, a.accumulate = acc;
            a.depth = depth, a.split = split;
            const int e = cuda::Gemv(a, nullptr);
            const std::string what = "gemv (k " + std::to_string(k) + ", rows " +
                                     std::to_string(rows) + ", depth " + std::to_string(depth) +
                                     ", split " + std::to_string(split) +
                                     (acc ? ", accumulate)" : ")");
            if (e != 0) {
              ++failures;
              std::printf("FAIL %s: launch error %d\n", what.c_str(), e);
            }
            Expect(what, ToHost(dy, want.size()), want, 2e-3f, 2e-3f);
            cudaFree(dx), cudaFree(dy);
          }
    cudaFree(dw);
  }
  const int k = 776;
  // RMSNorm in front, SwiGLU behind: the reference normalizes in fp32,
  // rounds to bf16, multiplies, then pairs rows 2j, 2j + 1.
  const int n2 = 1008;  // a multiple of 8 for the pairing
  std::vector<float> w2f = Random(static_cast<size_t>(n2) * k, 0.05f), norm = Random(k);
  std::vector<uint16_t> w2(w2f.size());
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = Fp32ToBf16(w2f[i]), w2f[i] = Bf16ToFp32(w2[i]);
  uint16_t* dw2 = ToDevice(w2);
  float* dnorm = ToDevice(norm);
  for (int rows = 1; rows <= cuda::kGemvMaxRows; ++rows)
    for (int split : {1, 2, 4})
      for (int variant = 0; variant < 3; ++variant) {  // plain, SwiGLU, GeGLU behind
        const bool swiglu = variant > 0;
        const cuda::Gate gate = variant == 2 ? cuda::Gate::kGeluTanh : cuda::Gate::kSilu;
        std::vector<float> x = Random(static_cast<size_t>(rows) * k, 3.0f);
        std::vector<float> xn(x.size());
        for (int m = 0; m < rows; ++m) {
          double ss = 0;
          for (int j = 0; j < k; ++j) ss += x[m * k + j] * x[m * k + j];
          const float inv = 1.0f / std::sqrt(static_cast<float>(ss / k) + 1e-5f);
          for (int j = 0; j < k; ++j)
            xn[m * k + j] = Bf16ToFp32(Fp32ToBf16(x[m * k + j] * inv * norm[j]));
        }
        std::vector<float> y(static_cast<size_t>(rows) * n2);
        for (int m = 0; m < rows; ++m)
          for (int r = 0; r < n2; ++r) {
            double d = 0;
            for (int j = 0; j < k; ++j)
              d += static_cast<double>(w2f[static_cast<size_t>(r) * k + j]) * xn[m * k + j];
            y[m * n2 + r] = static_cast<float>(d);
          }
        std::vector<float> want = y;
        if (swiglu) {
          want.assign(static_cast<size_t>(rows) * n2 / 2, 0.0f);
          for (int m = 0; m < rows; ++m)
            for (int j = 0; j < n2 / 2; ++j) {
              const float g = y[m * n2 + 2 * j], u = y[m * n2 + 2 * j + 1];
              want[m * n2 / 2 + j] = (gate == cuda::Gate::kSilu ? Silu(g) : GeluTanh(g)) * u;
            }
        }
        float* dx = ToDevice(x);
        float* dy = nullptr;
        uint16_t* dact = nullptr;
        cudaMalloc(&dy, y.size() * sizeof(float));
        cudaMalloc(&dact, want.size() * sizeof(uint16_t));
        cuda::GemvArgs a;
        a.w = dw2, a.xf = dx, a.norm = dnorm, a.eps = 1e-5f, a.y = dy, a.rows = rows, a.n = n2;
        a.k = k, a.depth = swiglu ? 8 : 4, a.split = split;
        if (swiglu) a.act = dact;
        a.gate = gate;
        const int e = cuda::Gemv(a, nullptr);
        const std::string what = "gemv with rms norm" +
                                 std::string(variant == 1   ? " and swiglu"
                                             : variant == 2 ? " and geglu"
                                                            : "") +
                                 " (rows " + std::to_string(rows) + ", split " +
                                 std::to_string(split) + ")";
        if (e != 0) {
          ++failures;
          std::printf("FAIL %s: launch error %d\n", what.c_str(), e);
        }
        if (swiglu)
          Expect(what, Bf16ToHost(dact, want.size()), want, 3e-3f, 1e-2f);
        else
          Expect(what, ToHost(dy, want.size()), want, 2e-3f, 2e-3f);
        cudaFree(dx), cudaFree(dy), cudaFree(dact);
      }
  cudaFree(dw2), cudaFree(dnorm);
}

// Rows quantized to e4m3 with a scale each: every element within half a
// step of e4m3 of its value (relative 1/16), the largest at 448; then the
// FP8 matrix-vector kernel against fp32 loops over the dequantized operands.
// RopeStoreKv against a loop: both layouts, a partial rotation, a bias, a
// token whose K and V are not stored.
void TestRopeStoreKv() {
  const int n_head = 4, n_kv = 2, hd = 32, bs = 4, T = 3;
  const int q_dim = n_head * hd, kv_dim = n_kv * hd, width = q_dim + 2 * kv_dim;
  const std::vector<int32_t> pos = {0, 77, 1500}, slot = {2, -1, 9};
  const size_t cache = static_cast<size_t>(3) * n_kv * bs * hd;  // 3 blocks
  for (bool neox : {true, false})
    for (int n_rot : {hd, hd / 2}) {
      const std::vector<float> qkv = Random(static_cast<size_t>(T) * width), b = Random(width);
      std::vector<float> inv_freq(n_rot / 2);
      for (int i = 0; i < n_rot / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / n_rot);
      std::vector<float> want_q(static_cast<size_t>(T) * q_dim), want_kv(2 * cache, 0.0f);
      for (int t = 0; t < T; ++t) {
        std::vector<double> x(width);
        for (int e = 0; e < width; ++e) x[e] = static_cast<double>(qkv[t * width + e]) + b[e];
        for (int h = 0; h < n_head + n_kv; ++h)  // Q's and K's heads rotate
          for (int i = 0; i < n_rot / 2; ++i) {
            const int i0 = h * hd + (neox ? i : 2 * i),
                      i1 = h * hd + (neox ? i + n_rot / 2 : 2 * i + 1);
            const double a = static_cast<double>(static_cast<float>(pos[t]) * inv_freq[i]);
            const double x0 = x[i0], x1 = x[i1];
            x[i0] = x0 * std::cos(a) - x1 * std::sin(a);
            x[i1] = x0 * std::sin(a) + x1 * std::cos(a);
          }
        for (int e = 0; e < q_dim; ++e) want_q[t * q_dim + e] = static_cast<float>(x[e]);
        if (slot[t] < 0) continue;
        for (int e = 0; e < 2 * kv_dim; ++e) {
          const int part = e / kv_dim, kvh = e % kv_dim / hd, d = e % hd;
          want_kv[part * cache +
                  ((static_cast<size_t>(slot[t] / bs) * n_kv + kvh) * bs + slot[t] % bs) * hd + d] =
              static_cast<float>(x[q_dim + e]);
        }
      }
      float *dqkv = ToDevice(qkv), *db = ToDevice(b), *dfreq = ToDevice(inv_freq), *dq = nullptr;
      int32_t *dpos = ToDevice(pos), *dslot = ToDevice(slot);
      cudaMalloc(&dq, sizeof(float) * T * q_dim);
      for (cuda::KvCache kv : {cuda::KvCache::kBf16, cuda::KvCache::kE4m3}) {
        const size_t eb = cuda::KvCacheBytes(kv);
        uint8_t* dkv = nullptr;
        cudaMalloc(&dkv, eb * 2 * cache);
        cudaMemset(dkv, 0, eb * 2 * cache);
        cuda::RopeKvArgs r;
        r.qkv = dqkv, r.bias = db, r.pos = dpos, r.slot = dslot, r.inv_freq = dfreq, r.q = dq;
        r.k_cache = dkv, r.v_cache = dkv + eb * cache, r.cache = kv;
        r.n = T, r.n_head = n_head, r.n_kv = n_kv;
        r.head_dim = hd, r.n_rot = n_rot, r.block_size = bs, r.neox = neox;
        failures += cuda::RopeStoreKv(r, nullptr) != 0;
        const std::string what = std::string("rope and K/V store (") + (neox ? "halves" : "pairs") +
                                 ", n_rot " + std::to_string(n_rot) +
                                 (kv == cuda::KvCache::kE4m3 ? ", e4m3 cache)" : ")");
        Expect(what + ": Q", ToHost(dq, want_q.size()), want_q, 1e-5f, 1e-5f);
        Expect(what + ": K and V", CacheToHost(dkv, 2 * cache, kv), want_kv, 1e-3f, CacheRtol(kv));
        cudaFree(dkv);
      }
      cudaFree(dqkv), cudaFree(db), cudaFree(dfreq), cudaFree(dq), cudaFree(dpos), cudaFree(dslot);
    }
}

// RoPE and the K/V store behind the matrix-vector product: Q and both
// caches exactly as the product into y followed by RopeStoreKv give them,
// for split halves and adjacent pairs, a whole and a partial rotation,
// with and without a bias, a token whose K/V are not stored, every row
// count, depth and split.
void TestGemvRope() {
  const int n_head = 4, n_kv = 2, hd = 64, k = 256, bs = 16, n_blocks = 8;
  const int n = (n_head + 2 * n_kv) * hd, q_dim = n_head * hd;
  const size_t cache = static_cast<size_t>(n_blocks) * n_kv * bs * hd;
  std::vector<float> wf = Random(static_cast<size_t>(n) * k, 0.05f);
  std::vector<uint16_t> w(wf.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = Fp32ToBf16(wf[i]);
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i)
    inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / hd));
  uint16_t* dw = ToDevice(w);
  float* dbias = ToDevice(Random(n));
  float* dfreq = ToDevice(inv_freq);
  int32_t* dpos = ToDevice(std::vector<int32_t>{5, 300, 1027, 4000});
  int32_t* dslot = ToDevice(std::vector<int32_t>{3, 17, -1, 100});
  float *y = nullptr, *q = nullptr;
  uint8_t* caches = nullptr;  // K, V by the separate kernel; K, V by the epilogue
  cudaMalloc(&y, sizeof(float) * cuda::kGemvMaxRows * n);
  cudaMalloc(&q, sizeof(float) * 2 * cuda::kGemvMaxRows * q_dim);
  cudaMalloc(&caches, sizeof(uint16_t) * 4 * cache);
  // An e4m3 cache for a whole rotation with a bias.
  for (cuda::KvCache kv : {cuda::KvCache::kBf16, cuda::KvCache::kE4m3})
    for (bool neox : {true, false})
      for (int n_rot : {hd, hd / 2})
        for (bool bias : {true, false})
          for (int rows = 1; rows <= cuda::kGemvMaxRows; ++rows)
            for (int depth : {4, 8})
              for (int split : {1, 2, 4}) {
                if (kv == cuda::KvCache::kE4m3 && (n_rot != hd || !bias)) continue;
                const size_t eb = cuda::KvCacheBytes(kv);
                std::vector<float> x = Random(static_cast<size_t>(rows) * k);
                std::vector<uint16_t> xb(x.size());
                for (size_t i = 0; i < x.size(); ++i) xb[i] = Fp32ToBf16(x[i]);
                uint16_t* dx = ToDevice(xb);
                cudaMemset(q, 0, sizeof(float) * 2 * cuda::kGemvMaxRows * q_dim);
                cudaMemset(caches, 0, eb * 4 * cache);
                cuda::GemvArgs g;
                g.w = dw, g.x = dx, g.y = y, g.rows = rows, g.n = n, g.k = k;
                g.depth = depth, g.split = split;
                cuda::RopeKvArgs r;
                r.qkv = y, r.bias = bias ? dbias : nullptr, r.pos = dpos, r.slot = dslot;
                r.inv_freq = dfreq, r.q = q, r.k_cache = caches, r.v_cache = caches + eb * cache;
                r.cache = kv;
                r.n = rows, r.n_head = n_head, r.n_kv = n_kv, r.head_dim = hd, r.n_rot = n_rot;
                r.block_size = bs, r.neox = neox;
                int e = cuda::Gemv(g, nullptr);
                e |= cuda::RopeStoreKv(r, nullptr);
                r.q = q + cuda::kGemvMaxRows * q_dim;
                r.k_cache = caches + 2 * eb * cache, r.v_cache = caches + 3 * eb * cache;
                g.y = nullptr;
                g.rope = r;
                e |= cuda::Gemv(g, nullptr);
                const std::string what =
                    std::string("gemv with RoPE behind (") + (neox ? "halves" : "pairs") +
                    ", n_rot " + std::to_string(n_rot) + (bias ? ", bias" : "") + ", rows " +
                    std::to_string(rows) + ", depth " + std::to_string(depth) + ", split " +
                    std::to_string(split) + (kv == cuda::KvCache::kE4m3 ? ", e4m3 cache)" : ")");
                if (e != 0) {
                  ++failures;
                  std::printf("FAIL %s: launch error %d\n", what.c_str(), e);
                }
                const std::vector<float> qs = ToHost(q, 2 * cuda::kGemvMaxRows * q_dim);
                const size_t nq = static_cast<size_t>(rows) * q_dim;
                const size_t at = cuda::kGemvMaxRows * q_dim;
                Expect(what + ": Q", std::vector<float>(qs.begin() + at, qs.begin() + at + nq),
                       std::vector<float>(qs.begin(), qs.begin() + nq), 0, 0);
                const std::vector<float> kvs = CacheToHost(caches, 4 * cache, kv);
                Expect(what + ": K and V caches",
                       std::vector<float>(kvs.begin() + 2 * cache, kvs.end()),
                       std::vector<float>(kvs.begin(), kvs.begin() + 2 * cache), 0, 0);
                cudaFree(dx);
              }
  cudaFree(dw), cudaFree(dbias), cudaFree(dfreq), cudaFree(dpos), cudaFree(dslot);
  cudaFree(y), cudaFree(q), cudaFree(caches);
}

void TestFp8() {
  const int n = 1000, k = 832;  // k a multiple of 64, n of 8 (not of the rows per block)
  std::vector<float> wf = Random(static_cast<size_t>(n) * k, 0.05f);
  for (int j = 0; j < k; ++j) wf[static_cast<size_t>(7) * k + j] = 0.0f;  // a zero row
  // A row down to e4m3's subnormals (below 2^-6 of 448, its largest).
  for (int j = 0; j < k; ++j)
    wf[static_cast<size_t>(9) * k + j] = (j % 2 ? -0.05f : 0.05f) * std::ldexp(1.0f, -(j % 18));
  std::vector<uint16_t> w(wf.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = Fp32ToBf16(wf[i]), wf[i] = Bf16ToFp32(w[i]);
  uint16_t* dw = ToDevice(w);
  uint8_t* dq = nullptr;
  float* ds = nullptr;
  cudaMalloc(&dq, wf.size());
  cudaMalloc(&ds, n * sizeof(float));
  failures += cuda::QuantizeRowsFp8(dw, n, k, dq, ds, nullptr) != 0;
  const std::vector<uint8_t> q = ToHost(dq, wf.size());
  const std::vector<float> scale = ToHost(ds, n);
  std::vector<float> deq(wf.size()), want_deq(wf.size());
  bool scales_ok = true;
  for (int r = 0; r < n; ++r) {
    float mx = 0;
    for (int j = 0; j < k; ++j) mx = std::max(mx, std::fabs(wf[static_cast<size_t>(r) * k + j]));
    scales_ok &= std::fabs(scale[r] - (mx > 0 ? mx / 448.0f : 1.0f)) <= 1e-6f * scale[r];
    for (int j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(r) * k + j;
      deq[i] = Fp8E4M3ToFp32(q[i]) * scale[r];
      want_deq[i] = wf[i];
    }
  }
  failures += !scales_ok;
  std::printf("%s fp8 row scales = max|row| / 448 (1 for a zero row)\n",
              scales_ok ? "ok  " : "FAIL");
  // e4m3 keeps 3 mantissa bits: a relative error of at most 1/16, and
  // values below the smallest normal (2^-6 of the scale) within 2^-10 of
  // the scale (under 1e-6 here).
  Expect("fp8 quantized rows", deq, want_deq, 1e-6f, 1.0f / 16);
  uint16_t* dback = nullptr;
  cudaMalloc(&dback, wf.size() * sizeof(uint16_t));
  failures += cuda::DequantizeRowsFp8(dq, ds, n, k, dback, nullptr) != 0;
  Expect("fp8 rows dequantized to bf16", Bf16ToHost(dback, deq.size()), deq, 1e-6f, 8e-3f);
  // y[m, r] = sum_j deq[r, j] * xin[m, j] (+ y0), in double.
  auto product = [&](const std::vector<float>& xin, int rows, const std::vector<float>* y0) {
    std::vector<float> want(static_cast<size_t>(rows) * n);
    for (int m = 0; m < rows; ++m)
      for (int r = 0; r < n; ++r) {
        double d = 0;
        for (int j = 0; j < k; ++j)
          d += static_cast<double>(deq[static_cast<size_t>(r) * k + j]) * xin[m * k + j];
        want[m * n + r] = static_cast<float>(d) + (y0 ? (*y0)[m * n + r] : 0.0f);
      }
    return want;
  };
  auto gate_of = [&](const std::vector<float>& y, int rows) {
    std::vector<float> g(static_cast<size_t>(rows) * n / 2);
    for (int m = 0; m < rows; ++m)
      for (int j = 0; j < n / 2; ++j)
        g[m * n / 2 + j] = Silu(y[m * n + 2 * j]) * y[m * n + 2 * j + 1];
    return g;
  };
  std::vector<float> norm = Random(k);
  float* dnorm = ToDevice(norm);
  // The CUDA-core kernel on e4m3 weights (Gemv with w8): x bf16 as it is.
  for (int rows = 1; rows <= cuda::kGemvMaxRows; ++rows)
    for (int depth : {4, 8})
      for (int split : {1, 4})
        for (bool acc : {false, true}) {
          std::vector<float> x = Random(static_cast<size_t>(rows) * k);
          std::vector<uint16_t> xb(x.size());
          for (size_t i = 0; i < x.size(); ++i) xb[i] = Fp32ToBf16(x[i]), x[i] = Bf16ToFp32(xb[i]);
          std::vector<float> y0 = Random(static_cast<size_t>(rows) * n);
          const std::vector<float> want = product(x, rows, acc ? &y0 : nullptr);
          uint16_t* dx = ToDevice(xb);
          float* dy = ToDevice(y0);
          cuda::GemvArgs a;
          a.w8 = dq, a.w_scale = ds, a.x = dx, a.y = dy, a.rows = rows, a.n = n, a.k = k;
          a.accumulate = acc, a.depth = depth, a.split = split;
          const int e = cuda::Gemv(a, nullptr);
          const std::string what = "fp8 gemv, CUDA cores (rows " + std::to_string(rows) +
                                   ", depth " + std::to_string(depth) + ", split " +
                                   std::to_string(split) + (acc ? ", accumulate)" : ")");
          if (e != 0) {
            ++failures;
            std::printf("FAIL %s: launch error %d\n", what.c_str(), e);
          }
          Expect(what, ToHost(dy, want.size()), want, 2e-3f, 2e-3f);
          cudaFree(dx), cudaFree(dy);
        }
  // The tensor-core kernel (GemvFp8): x's rows quantized (bf16, or fp32
  // normalized first), against the dequantized operands; the gate behind too.
  for (int rows : {1, 3, 8, 9, 16})
    for (int variant = 0; variant < 4; ++variant) {  // plain, accumulate, normalized, gated
      const bool acc = variant == 1, normed = variant == 2, gated = variant == 3;
      std::vector<float> x = Random(static_cast<size_t>(rows) * k, 2.0f);
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = Fp32ToBf16(x[i]);
      uint16_t* dxb = ToDevice(xb);
      float* dxf = ToDevice(x);
      uint8_t* dx8 = nullptr;
      float* dxs = nullptr;
      cudaMalloc(&dx8, x.size());
      cudaMalloc(&dxs, rows * sizeof(float));
      const int eq = normed
                         ? cuda::QuantizeNormRowsFp8(dxf, dnorm, 1e-5f, rows, k, dx8, dxs, nullptr)
                         : cuda::QuantizeRowsFp8(dxb, rows, k, dx8, dxs, nullptr);
      failures += eq != 0;
      const std::vector<uint8_t> x8 = ToHost(dx8, x.size());
      const std::vector<float> xs = ToHost(dxs, rows);
      std::vector<float> xdeq(x.size());
      for (int m = 0; m < rows; ++m)
        for (int j = 0; j < k; ++j) {
          const size_t i = static_cast<size_t>(m) * k + j;
          xdeq[i] = Fp8E4M3ToFp32(x8[i]) * xs[m];
        }
      const std::string what = "fp8 gemv, tensor cores (rows " + std::to_string(rows) +
                               (acc      ? ", accumulate"
                                : normed ? ", normalized"
                                : gated  ? ", gated"
                                         : "") +
                               ")";
      std::vector<float> y0 = Random(static_cast<size_t>(rows) * n);
      const std::vector<float> want = product(xdeq, rows, acc ? &y0 : nullptr);
      float* dy = ToDevice(y0);
      uint16_t* dact = nullptr;
      cudaMalloc(&dact, static_cast<size_t>(rows) * n / 2 * sizeof(uint16_t));
      cuda::GemvFp8Args a;
      a.w = dq, a.w_scale = ds, a.x = dx8, a.x_scale = dxs, a.rows = rows, a.n = n, a.k = k;
      a.accumulate = acc;
      if (gated) {
        a.act = dact, a.gate = cuda::Gate::kSilu;
      } else {
        a.y = dy;
      }
      const int e = cuda::GemvFp8(a, nullptr);
      if (e != 0) {
        ++failures;
        std::printf("FAIL %s: launch error %d\n", what.c_str(), e);
      }
      if (gated) {
        const std::vector<float> g = gate_of(want, rows);
        Expect(what, Bf16ToHost(dact, g.size()), g, 3e-3f, 1e-2f);
      } else {
        Expect(what, ToHost(dy, want.size()), want, 4e-3f, 4e-3f);
      }
      for (void* p : {static_cast<void*>(dxb), static_cast<void*>(dxf), static_cast<void*>(dx8),
                      static_cast<void*>(dxs), static_cast<void*>(dy), static_cast<void*>(dact)})
        cudaFree(p);
    }
  // Activations for the FP8 GEMM: normalized rows to e4m3 with a scale each.
  {
    const int rows = 5;
    std::vector<float> x = Random(static_cast<size_t>(rows) * k, 3.0f);
    float* dxf = ToDevice(x);
    uint8_t* dx8 = nullptr;
    float* dxs = nullptr;
    cudaMalloc(&dx8, x.size());
    cudaMalloc(&dxs, rows * sizeof(float));
    failures += cuda::QuantizeNormRowsFp8(dxf, dnorm, 1e-5f, rows, k, dx8, dxs, nullptr) != 0;
    const std::vector<uint8_t> x8 = ToHost(dx8, x.size());
    const std::vector<float> xs = ToHost(dxs, rows);
    std::vector<float> got(x.size()), want(x.size());
    for (int m = 0; m < rows; ++m) {
      double ss = 0;
      for (int j = 0; j < k; ++j) ss += static_cast<double>(x[m * k + j]) * x[m * k + j];
      const double inv = 1 / std::sqrt(ss / k + 1e-5);
      for (int j = 0; j < k; ++j) {
        const size_t i = static_cast<size_t>(m) * k + j;
        want[i] = static_cast<float>(x[i] * inv * norm[j]);
        got[i] = Fp8E4M3ToFp32(x8[i]) * xs[m];
      }
    }
    Expect("fp8 normalized activation rows", got, want, 5e-5f, 1.0f / 16);
    cudaFree(dxf), cudaFree(dx8), cudaFree(dxs);
  }
  cudaFree(dnorm);
  cudaFree(dw), cudaFree(dq), cudaFree(ds), cudaFree(dback);
}

void TestArgmax() {
  const int rows = 4, n = 70000;
  std::vector<float> x = Random(static_cast<size_t>(rows) * n);
  x[5] = 50, x[n + n - 1] = 50;
  // Ties, within one part of the row and across parts: the first wins.
  x[2 * n + 100] = 50, x[2 * n + 200] = 50, x[2 * n + 60000] = 50;
  x[3 * n + 7] = std::nanf("");  // a row with a NaN: -1
  float* dx = ToDevice(x);
  uint64_t *keys = nullptr, *scratch = nullptr;
  cudaMalloc(&keys, rows * sizeof(uint64_t));
  cudaMalloc(&scratch, 2 * rows * sizeof(uint64_t));
  cudaMemset(scratch, 0, 2 * rows * sizeof(uint64_t));
  auto clear = [&] {
    const std::vector<uint64_t> left = ToHost(scratch, 2 * rows);
    return std::all_of(left.begin(), left.end(), [](uint64_t w) { return w == 0; });
  };
  // Twice: the scratch is left as the next call needs it.
  for (int call = 0; call < 2; ++call) {
    const int e = cuda::ArgmaxRows(dx, rows, n, 0, keys, scratch, nullptr);
    const std::vector<uint64_t> got = ToHost(keys, rows);
    int32_t id[rows];
    for (int r = 0; r < rows; ++r) id[r] = cuda::ArgmaxKeyIndex(got[r]);
    const bool ok =
        e == 0 && clear() && id[0] == 5 && id[1] == n - 1 && id[2] == 100 && id[3] == -1;
    failures += !ok;
    std::printf("%s argmax, call %d (%d %d %d %d)\n", ok ? "ok  " : "FAIL", call, id[0], id[1],
                id[2], id[3]);
  }
  // Each row in three slices of its columns (as ranks holding parts of the
  // vocabulary compute them), each with its first index: the largest key
  // of the three is the whole row's.
  {
    const int cut[4] = {0, 150, 60000, n};
    std::vector<uint64_t> best(rows, 0);
    int e = 0;
    for (int p = 0; p < 3; ++p) {
      const int w = cut[p + 1] - cut[p];
      std::vector<float> part(static_cast<size_t>(rows) * w);
      for (int r = 0; r < rows; ++r)
        std::copy_n(&x[static_cast<size_t>(r) * n + cut[p]], w, &part[static_cast<size_t>(r) * w]);
      float* dp = ToDevice(part);
      e |= cuda::ArgmaxRows(dp, rows, w, cut[p], keys, scratch, nullptr);
      const std::vector<uint64_t> got = ToHost(keys, rows);
      for (int r = 0; r < rows; ++r) best[r] = std::max(best[r], got[r]);
      cudaFree(dp);
    }
    int32_t id[rows];
    for (int r = 0; r < rows; ++r) id[r] = cuda::ArgmaxKeyIndex(best[r]);
    const bool ok =
        e == 0 && clear() && id[0] == 5 && id[1] == n - 1 && id[2] == 100 && id[3] == -1;
    failures += !ok;
    std::printf("%s argmax over three slices of each row (%d %d %d %d)\n", ok ? "ok  " : "FAIL",
                id[0], id[1], id[2], id[3]);
  }
  cudaFree(dx), cudaFree(keys), cudaFree(scratch);
}

// Against a host sort by (value descending, index ascending).
void TestTopK() {
  const int rows = 4, n = 70000;
  std::vector<float> x = Random(static_cast<size_t>(rows) * n);
  for (int i = 0; i < n; ++i) x[n + i] = 1.0f;  // row 1: all equal but three
  x[n + 500] = 3, x[n + 69999] = 2, x[n + 7] = 2;
  x[2 * n + 10] = x[2 * n + 20] = x[2 * n + 30] = 9;  // row 2: a tie at the top
  x[2 * n + 40] = -0.0f, x[2 * n + 41] = 0.0f;
  x[3 * n + 7] = std::nanf("");  // row 3: not finite
  float* dx = ToDevice(x);
  for (int k : {1, 8, 40, 64}) {
    int32_t* dids = nullptr;
    float* dvals = nullptr;
    cudaMalloc(&dids, rows * k * sizeof(int32_t));
    cudaMalloc(&dvals, rows * k * sizeof(float));
    const int e = cuda::TopKRows(dx, rows, n, k, dids, dvals, nullptr);
    const std::vector<int32_t> ids = ToHost(dids, rows * k);
    const std::vector<float> vals = ToHost(dvals, rows * k);
    bool ok = e == 0 && ids[3 * k] == -1;
    for (int r = 0; r < 3 && ok; ++r) {
      std::vector<int> order(n);
      for (int i = 0; i < n; ++i) order[i] = i;
      const float* row = &x[static_cast<size_t>(r) * n];
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      for (int j = 0; j < k; ++j)
        ok &= ids[r * k + j] == order[j] && vals[r * k + j] == row[order[j]];
    }
    failures += !ok;
    std::printf("%s top-%d of %d rows of %d (error %d)\n", ok ? "ok  " : "FAIL", k, rows, n, e);
    cudaFree(dids), cudaFree(dvals);
  }
  cudaFree(dx);
}

}  // namespace

// Every layer of a one-token decode step in one launch (DecodeLayers)
// against fp64 loops with the same bf16 roundings: the residual after the
// layers, and each layer's K and V stored at the token's slot. The
// reference attends over the cache as stored (the token's own K and V read
// back), so an e4m3 cache is checked by its stored values. Run twice from
// the same state: the counters are left zero and the result repeats to
// the bit.
void TestDecodeLayers(int hd, int n_head, int n_kv, int d, int n_ff, int n_layer, int pos,
                      bool neox, cuda::KvCache kv, int range_keys = 32, bool tensor_cores = false) {
  const std::string name =
      "decode layers (hd " + std::to_string(hd) + ", heads " + std::to_string(n_head) + "/" +
      std::to_string(n_kv) + ", d " + std::to_string(d) + ", ff " + std::to_string(n_ff) +
      ", pos " + std::to_string(pos) + ", ranges of " + std::to_string(range_keys) + "+" +
      (kv == cuda::KvCache::kE4m3 ? ", e4m3" : "") + (tensor_cores ? ", tensor cores" : "") + ")";
  const char* refusal = cuda::DecodeLayersRefusal(d, n_head, n_kv, hd, hd, n_ff);
  if (*refusal) {
    ++failures;
    std::printf("FAIL %s: refused: %s\n", name.c_str(), refusal);
    return;
  }
  const int bs = 16, q_dim = n_head * hd, kv_dim = n_kv * hd, width = q_dim + 2 * kv_dim;
  const int grp = n_head / n_kv;
  const int n_blocks = (pos + 1 + bs - 1) / bs + 3;  // a few blocks the token does not use
  std::vector<int32_t> perm(n_blocks);
  for (int i = 0; i < n_blocks; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::vector<int32_t> table(perm.begin(), perm.begin() + (pos + 1 + bs - 1) / bs);
  const size_t cache = static_cast<size_t>(n_blocks) * bs * kv_dim;
  auto bf16 = [](const std::vector<float>& f) {
    std::vector<uint16_t> b(f.size());
    for (size_t i = 0; i < f.size(); ++i) b[i] = Fp32ToBf16(f[i]);
    return b;
  };
  auto round = [](float f) { return Bf16ToFp32(Fp32ToBf16(f)); };
  struct Layer {
    std::vector<uint16_t> wqkv, wo, wgu, wdown;
    std::vector<float> an, fn;
    void *k = nullptr, *v = nullptr;
  };
  std::vector<Layer> layers(n_layer);
  std::vector<cuda::DecodeLayer> dev(n_layer);
  std::vector<void*> allocs;
  for (int l = 0; l < n_layer; ++l) {
    Layer& L = layers[l];
    L.wqkv = bf16(Random(static_cast<size_t>(width) * d, 1.0f / std::sqrt(d)));
    L.wo = bf16(Random(static_cast<size_t>(d) * q_dim, 1.0f / std::sqrt(q_dim)));
    L.wgu = bf16(Random(static_cast<size_t>(2) * n_ff * d, 1.0f / std::sqrt(d)));
    L.wdown = bf16(Random(static_cast<size_t>(d) * n_ff, 1.0f / std::sqrt(n_ff)));
    L.an = Random(d, 0.2f);
    L.fn = Random(d, 0.2f);
    for (float& w : L.an) w += 1;
    for (float& w : L.fn) w += 1;
    // The cache: random keys and values everywhere (stored as the kernels store them).
    std::vector<float> kvals = Random(cache), vvals = Random(cache);
    if (kv == cuda::KvCache::kE4m3) {
      std::vector<uint8_t> k8(cache), v8(cache);
      // Any sign, exponent field below 8: |value| < 2, never NaN.
      for (size_t i = 0; i < cache; ++i)
        k8[i] = static_cast<uint8_t>(rng() & 0xbf), v8[i] = static_cast<uint8_t>(rng() & 0xbf);
      L.k = ToDevice(k8), L.v = ToDevice(v8);
    } else {
      L.k = ToDevice(bf16(kvals)), L.v = ToDevice(bf16(vvals));
    }
    cuda::DecodeLayer& D = dev[l];
    D.wqkv = ToDevice(L.wqkv), D.wo = ToDevice(L.wo), D.wgu = ToDevice(L.wgu);
    D.wdown = ToDevice(L.wdown), D.attn_norm = ToDevice(L.an), D.ffn_norm = ToDevice(L.fn);
    D.k_cache = L.k, D.v_cache = L.v;
    allocs.insert(allocs.end(), {(void*)D.wqkv, (void*)D.wo, (void*)D.wgu, (void*)D.wdown,
                                 (void*)D.attn_norm, (void*)D.ffn_norm, L.k, L.v});
  }
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / hd);
  const std::vector<float> x0 = Random(d);
  const int32_t slot = table[pos / bs] * bs + pos % bs;
  const std::vector<int32_t> zero = {0}, posv = {pos}, slotv = {slot}, seq_table = {0};
  cuda::DecodeLayersArgs a;
  a.layers = ToDevice(dev);
  a.n_layer = n_layer;
  a.x = ToDevice(x0);
  cudaMalloc(&a.qkv, width * sizeof(float));
  cudaMalloc(&a.att, q_dim * sizeof(uint16_t));
  cudaMalloc(&a.act, n_ff * sizeof(uint16_t));
  cudaMalloc(&a.partial, static_cast<size_t>(n_kv) * cuda::kDecodeLayersRanges * grp * (hd + 2) *
                             sizeof(float));
  const int n_counters = cuda::DecodeLayersCounters(n_layer, n_kv);
  cudaMalloc(&a.counters, n_counters * sizeof(int));
  cudaMemset(a.counters, 0, n_counters * sizeof(int));
  a.tokens = ToDevice(zero), a.pos = ToDevice(posv), a.slot = ToDevice(slotv);
  a.tok_seq = ToDevice(zero), a.seq_table = ToDevice(seq_table), a.tables = ToDevice(table);
  a.inv_freq = ToDevice(inv_freq);
  a.cache = kv;
  a.d = d, a.n_head = n_head, a.n_kv = n_kv, a.head_dim = hd, a.n_rot = hd, a.n_ff = n_ff;
  a.block_size = bs;
  a.neox = neox;
  a.eps = 1e-5f;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.range_keys = range_keys;
  a.tensor_cores = tensor_cores;
  int e = cuda::DecodeLayers(a, nullptr);
  const cudaError_t sync = cudaDeviceSynchronize();
  if (e != 0 || sync != cudaSuccess) {
    ++failures;
    std::printf("FAIL %s: launch error %d, %s\n", name.c_str(), e, cudaGetErrorString(sync));
    return;
  }
  const std::vector<float> got = ToHost(a.x, d);
  // The reference, layer by layer.
  std::vector<double> x(x0.begin(), x0.end());
  auto norm = [&](const std::vector<float>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const float inv = static_cast<float>(1 / std::sqrt(ss / d + a.eps));
    std::vector<float> xn(d);
    for (int i = 0; i < d; ++i) xn[i] = round(static_cast<float>(x[i]) * inv * w[i]);
    return xn;
  };
  auto product = [](const std::vector<uint16_t>& w, const std::vector<float>& in, int rows) {
    const size_t k = in.size();
    std::vector<double> y(rows);
    for (int r = 0; r < rows; ++r) {
      double s = 0;
      for (size_t j = 0; j < k; ++j) s += static_cast<double>(Bf16ToFp32(w[r * k + j])) * in[j];
      y[r] = s;
    }
    return y;
  };
  auto rotate = [&](std::vector<double>& v, int off) {
    for (int i = 0; i < hd / 2; ++i) {
      const double ang = static_cast<double>(pos) * inv_freq[i], c = std::cos(ang),
                   s = std::sin(ang);
      const int i0 = off + (neox ? i : 2 * i), i1 = off + (neox ? i + hd / 2 : 2 * i + 1);
      const double y0 = v[i0] * c - v[i1] * s, y1 = v[i0] * s + v[i1] * c;
      v[i0] = y0, v[i1] = y1;
    }
  };
  for (int l = 0; l < n_layer; ++l) {
    Layer& L = layers[l];
    std::vector<double> qkv = product(L.wqkv, norm(L.an), width);
    for (int h = 0; h < n_head + n_kv; ++h) rotate(qkv, h * hd);
    const std::vector<float> ks = CacheToHost(L.k, cache, kv), vs = CacheToHost(L.v, cache, kv);
    // The token's K and V as stored.
    std::vector<float> k_new(kv_dim), v_new(kv_dim), k_want(kv_dim), v_want(kv_dim);
    for (int g = 0; g < n_kv; ++g)
      for (int i = 0; i < hd; ++i) {
        const size_t at = ((static_cast<size_t>(slot / bs) * n_kv + g) * bs + slot % bs) * hd + i;
        k_new[g * hd + i] = ks[at], v_new[g * hd + i] = vs[at];
        k_want[g * hd + i] = static_cast<float>(qkv[q_dim + g * hd + i]);
        v_want[g * hd + i] = static_cast<float>(qkv[q_dim + kv_dim + g * hd + i]);
      }
    Expect(name + ": layer " + std::to_string(l) + " K stored", k_new, k_want, 1e-2f,
           CacheRtol(kv));
    Expect(name + ": layer " + std::to_string(l) + " V stored", v_new, v_want, 1e-2f,
           CacheRtol(kv));
    std::vector<float> att(q_dim);
    for (int h = 0; h < n_head; ++h) {
      const int g = h / grp;
      std::vector<double> sc(pos + 1);
      double mx = -1e300;
      for (int k = 0; k <= pos; ++k) {
        const size_t at = ((static_cast<size_t>(table[k / bs]) * n_kv + g) * bs + k % bs) * hd;
        double dot = 0;
        for (int i = 0; i < hd; ++i) dot += qkv[h * hd + i] * ks[at + i];
        sc[k] = dot * a.scale;
        mx = std::max(mx, sc[k]);
      }
      double sum = 0;
      for (double& s : sc) sum += (s = std::exp(s - mx));
      for (int i = 0; i < hd; ++i) {
        double o = 0;
        for (int k = 0; k <= pos; ++k)
          o += sc[k] * vs[((static_cast<size_t>(table[k / bs]) * n_kv + g) * bs + k % bs) * hd + i];
        att[h * hd + i] = round(static_cast<float>(o / sum));
      }
    }
    const std::vector<double> wo = product(L.wo, att, d);
    for (int i = 0; i < d; ++i) x[i] += wo[i];
    const std::vector<double> gu = product(L.wgu, norm(L.fn), 2 * n_ff);
    std::vector<float> act(n_ff);
    for (int j = 0; j < n_ff; ++j)
      act[j] = round(static_cast<float>(Silu(static_cast<float>(gu[2 * j])) * gu[2 * j + 1]));
    const std::vector<double> down = product(L.wdown, act, d);
    for (int i = 0; i < d; ++i) x[i] += down[i];
  }
  const std::vector<float> want(x.begin(), x.end());
  Expect(name + ": the residual", got, want, 1e-2f, 1e-2f);
  // Again from the same state: the same bits.
  cudaMemcpy(a.x, x0.data(), d * sizeof(float), cudaMemcpyHostToDevice);
  e = cuda::DecodeLayers(a, nullptr);
  cudaDeviceSynchronize();
  const std::vector<float> again = ToHost(a.x, d);
  const std::vector<int> counters = ToHost(a.counters, n_counters);
  const bool same = e == 0 && again == got,
             zeroed = std::all_of(counters.begin(), counters.end(), [](int c) { return c == 0; });
  if (!same || !zeroed) ++failures;
  std::printf("%s %s: a second run repeats to the bit, counters left zero\n",
              same && zeroed ? "ok  " : "FAIL", name.c_str());
  for (void* p : allocs) cudaFree(p);
  braid::kernels::cuda_test::FreeAll({a.layers, a.x, a.qkv, a.att, a.act, a.partial, a.counters,
                                      a.tokens, a.pos, a.slot, a.tok_seq, a.seq_table, a.tables,
                                      a.inv_freq});
}

int main() {
  if (!cuda_test::HaveGpu()) return cuda_test::kNoGpu;
  TestRmsNorm(300);
  TestRmsNorm(301);
  TestRmsNormAdd();
  TestGatedActivation(700);
  TestGatedActivation(701);
  TestWindowedPrefill();
  TestGemv();
  TestRopeStoreKv();
  TestGemvRope();
  TestFp8();
  TestArgmax();
  TestTopK();
  TestAttention(64, 32, 8, true, false, 1);
  TestAttention(64, 32, 8, true, false, 4);
  TestAttention(128, 32, 8, false, false, 3);
  TestAttention(128, 32, 8, false, false, 3, 1);  // one key in flight
  TestAttention(128, 12, 2, true, true, 1);       // qwen2: 6 query heads per KV head, biases
  TestAttention(16, 4, 2, true, false, 2);
  TestAttention(32, 8, 8, false, true, 1);
  TestAttention(128, 16, 8, true, false, 2, 4, true);       // qwen3: q/k norms
  TestAttention(256, 4, 1, true, false, 1, 4, true, 100);   // gemma 3: hd 256, window
  TestAttention(256, 8, 1, true, true, 3, 4, true, 45, 8);  // a window across split ranges
  TestAttention(256, 4, 1, true, false, 4);
  TestAttention(128, 32, 8, false, false, 3, 4, false, 45, 8);  // hd 128: a window across ranges
  TestAttention(64, 16, 8, true, false, 32, 4, false, 0, 1);    // ranges shorter than a tile
  // An e4m3 cache: both decode kernels, the cascade, several ranges, a window.
  TestAttention(128, 32, 8, false, false, 3, 4, false, 0, 64, cuda::KvCache::kE4m3);
  TestAttention(64, 32, 8, true, true, 4, 1, false, 0, 8, cuda::KvCache::kE4m3);
  TestAttention(128, 16, 8, true, false, 2, 4, true, 0, 64, cuda::KvCache::kE4m3);
  TestAttention(256, 8, 1, true, true, 3, 4, true, 45, 8, cuda::KvCache::kE4m3);
  // Every layer of a step in one launch: several ranges, one range, down
  // rows longer than a stage, 8 query heads per KV head, an e4m3 cache.
  TestDecodeLayers(64, 8, 2, 512, 1024, 2, 100, true, cuda::KvCache::kBf16);
  TestDecodeLayers(64, 8, 2, 512, 1024, 2, 5, false, cuda::KvCache::kE4m3);
  TestDecodeLayers(128, 8, 2, 1024, 18432, 2, 700, false, cuda::KvCache::kBf16);
  TestDecodeLayers(128, 16, 2, 2048, 2048, 3, 300, true, cuda::KvCache::kE4m3, 1);
  TestDecodeLayers(64, 32, 8, 2048, 8192, 2, 140, true, cuda::KvCache::kBf16);  // the 1B's layer
  TestDecodeLayers(64, 8, 2, 512, 1024, 2, 100, true, cuda::KvCache::kBf16, 32, true);
  TestDecodeLayers(128, 8, 2, 1024, 18432, 2, 700, false, cuda::KvCache::kBf16, 32, true);
  TestDecodeLayers(128, 16, 2, 2048, 2048, 3, 300, true, cuda::KvCache::kE4m3, 1, true);
  TestDecodeLayers(64, 32, 8, 2048, 8192, 2, 140, true, cuda::KvCache::kBf16, 32, true);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::printf("FAIL: %s\n", cudaGetErrorString(e));
    ++failures;
  }
  std::printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
