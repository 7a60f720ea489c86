// The CUDA backend's element-wise, normalization and attention kernels (the
// GEMMs are cuBLAS's). Pure compute on device pointers: the caller owns the
// buffers and the stream (`stream` is a cudaStream_t). bf16 values travel as
// uint16_t so that CUDA headers stay out of this one. Every launcher returns
// 0 (cudaSuccess) or the CUDA error of the launch.
//
// The kernels of the decode path (Embed, RmsNorm, RopeStoreKv, SwiGlu,
// DecodeAttention, Gemv, ArgmaxRows) are launched with programmatic
// dependent launch: each may start while the previous kernel on the stream
// finishes, and waits for it before reading what it wrote.
//
// KV layout, per layer: [block][kv_head][slot][head_dim] for K and for V
// (one KV head's rows of a block contiguous), each element bf16 or e4m3
// (KvCache); a token's KV slot is block * block_size + slot.
#pragma once

#include <cstdint>

namespace braid::kernels::cuda {

// The KV cache's elements: bf16, or FP8 e4m3 (stored from fp32 rounded to
// nearest, beyond +-448 saturated, no scale; read back exactly, as fp16).
enum class KvCache : uint8_t { kBf16, kE4m3 };
inline constexpr int KvCacheBytes(KvCache c) { return c == KvCache::kE4m3 ? 1 : 2; }

// x[t, :] = table[ids[t], :] * scale as fp32, for t < n.
int Embed(const uint16_t* table, const int32_t* ids, int n, int dim, float scale, float* x,
          void* stream);

// out[r, :] = bf16(x[src, :] / rms(x[src, :]) * w) with src = rows ? rows[r] : r, r < n.
int RmsNorm(const float* x, const float* w, const int32_t* rows, int n, int dim, float eps,
            uint16_t* out, void* stream);

struct RopeKvArgs {
  const float* qkv = nullptr;       // [n, n_head*hd + 2*n_kv*hd]: Q, K, V of each token
  const float* bias = nullptr;      // same width, or null
  const int32_t* pos = nullptr;     // [n] positions
  const int32_t* slot = nullptr;    // [n] KV slots (block * block_size + slot); < 0: not stored
  const float* inv_freq = nullptr;  // [n_rot / 2]
  float* q = nullptr;               // out: [n, n_head*hd] rotated queries
  void* k_cache = nullptr;          // this layer's K and V
  void* v_cache = nullptr;
  KvCache cache = KvCache::kBf16;
  int n = 0, n_head = 0, n_kv = 0, head_dim = 0, n_rot = 0, block_size = 0;
  bool neox = false;  // rotate split halves (HF) rather than adjacent pairs (GGUF llama)
};
// Adds the bias, rotates Q and K by position, writes Q and stores K and V
// (head_dim and n_rot even, n_rot <= head_dim; else -1).
int RopeStoreKv(const RopeKvArgs& a, void* stream);

// Per-head RMS norms of Q and K (Qwen3, Gemma 3), in place in qkv [n,
// n_head*hd + 2*n_kv*hd], before RopeStoreKv: the bias (when set, the
// whole row's) is added first, then every query head is normalized with
// q_norm [hd] and every KV head's K with k_norm [hd]. RopeStoreKv then
// runs without a bias.
int QkNorm(float* qkv, const float* bias, const float* q_norm, const float* k_norm, int n,
           int n_head, int n_kv, int head_dim, float eps, void* stream);

// The feed-forward block's gate: out = act(gate) * up.
enum class Gate {
  kSilu,      // SwiGLU
  kGeluTanh,  // GeGLU, GELU with the tanh approximation
};
// out[t, j] = bf16(act(gu[t, 2j]) * gu[t, 2j + 1]) for t < n, j < n_ff: the
// gate and up projections interleaved row by row.
int GatedActivation(const float* gu, int n, int n_ff, Gate gate, uint16_t* out, void* stream);

// x[r, :] += y[r, :] / rms(y[r, :]) * w for r < n (post norms: a branch's
// output normalized before the residual add).
int RmsNormAdd(const float* y, const float* w, int n, int dim, float eps, float* x, void* stream);

struct DecodeAttentionArgs {
  const float* q = nullptr;       // [tokens, n_head*hd] rotated queries
  const void* k_cache = nullptr;  // this layer's K and V
  const void* v_cache = nullptr;
  KvCache cache = KvCache::kBf16;
  const int32_t* tokens = nullptr;     // [n] which rows of q to attend for
  const int32_t* pos = nullptr;        // [tokens] positions: token t sees keys [0, pos[t]]
  const int32_t* tok_seq = nullptr;    // [tokens] the sequence of each token
  const int32_t* seq_table = nullptr;  // [sequences] offset of its block table in tables
  const int32_t* tables = nullptr;     // block tables, packed
  uint16_t* out = nullptr;             // [tokens, n_head*hd] bf16
  float* partial = nullptr;            // n_split > 1: [n, n_head, n_split, hd + 2] workspace
  int* counters = nullptr;             // n_split > 1: [n, n_kv] zeros, left zero
  int n = 0, n_head = 0, n_kv = 0, head_dim = 0, block_size = 0;
  int n_split = 1;  // key ranges per (token, KV head) (<= 32), merged by the last to finish
  // The fewest keys a range takes: a token with fewer than n_split *
  // range_keys keys to attend uses fewer ranges (one below 2 * range_keys).
  int range_keys = 64;
  int keys_in_flight = 4;  // keys each lane group loads before using the first: 1 or 4
  // The most keys any one sequence stores in this pass (its tokens' own), or
  // 0 when not known. Keys more than step_keys behind a token's last were
  // stored by earlier passes, already finished: the tensor-core kernel
  // loads its first tiles of those before waiting for the kernels ahead of
  // it (programmatic dependent launch).
  int step_keys = 0;
  // Tensor cores (mma) where the shape allows: head_dim 64 or 128 and
  // block_size a multiple of 16; else, or when false, CUDA cores.
  bool tensor_cores = true;
  float scale = 0;
  int window = 0;  // > 0: token t sees only keys (pos[t] - window, pos[t]] (sliding window)
  // Cascade (shared-prefix) attention: with key_start [tokens] set, token t
  // attends keys [key_start[t], pos[t]] here, and when key_start[t] > 0 the
  // keys before were attended elsewhere (CascadeAttention):
  // prefix_ranges more ranges per head, in prefix [n (the index into
  // `tokens`), n_head, prefix_ranges, hd + 2] as (output, max, sum) (a
  // normalized output has max = its log-sum-exp and sum 1; a sum of 0 is an
  // empty range), merged with this kernel's.
  const int32_t* key_start = nullptr;
  const float* prefix = nullptr;
  int prefix_ranges = 1;  // <= kMaxPrefixRanges
};
inline constexpr int kMaxPrefixRanges = 16;
// Attention of single query tokens over their sequence's paged KV (causal by
// position), all query heads of a KV head in one thread block, the keys split
// into n_split ranges when there are too few (token, KV head) pairs to fill
// the device; the block that finishes a (token, KV head) last merges its
// ranges. head_dim 16, 32, 64, 128 or 256; n_head / n_kv <= 8.
int DecodeAttention(const DecodeAttentionArgs& a, void* stream);
// Whether DecodeAttention supports the shape.
bool DecodeAttentionSupports(int head_dim, int group);

// Cascade attention on tensor cores: the shared prefix of each group of
// decode tokens attended once per KV head for all its members' query heads,
// into the ranges DecodeAttentionArgs::prefix merges. Group gi is
// groups[4 gi ..]: its members' offset into rows/index, their count m, the
// prefix's keys (positions [0, keys) of every member, the same blocks) and a
// member's sequence (its block table: tables + seq_table[seq]). Each entry
// of work is one thread block per KV head: group << 16 | block of 64 query
// rows << 4 | key range (of n_ranges splitting the prefix's 16-key tiles),
// or -1: an idle block.
// Writes prefix[index[off + i], h, range] = (unnormalized output, max, sum)
// for every member i and query head h. head_dim 64 or 128, at most 8 query
// heads per KV head, block_size a multiple of 16.
struct CascadeAttentionArgs {
  const float* q = nullptr;  // [tokens, n_head*hd] rotated queries
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  KvCache cache = KvCache::kBf16;
  const int32_t* tables = nullptr;
  const int32_t* seq_table = nullptr;
  const int32_t* groups = nullptr;
  const int32_t* work = nullptr;
  const int32_t* rows = nullptr;   // per member: its query row
  const int32_t* index = nullptr;  // per member: its index into DecodeAttentionArgs::tokens
  float* prefix = nullptr;
  int n_work = 0, n_head = 0, n_kv = 0, head_dim = 0, block_size = 0;
  int n_ranges = 1;  // <= kMaxPrefixRanges
  float scale = 0;
  // A group's prefix lies in full blocks that passes already finished
  // stored: with early_keys its first tiles are loaded before waiting for
  // the kernels ahead (programmatic dependent launch).
  bool early_keys = false;
};
int CascadeAttention(const CascadeAttentionArgs& a, void* stream);
// Query rows per work unit (block) of CascadeAttention.
inline constexpr int kCascadeBlockRows = 64;
bool CascadeAttentionSupports(int head_dim, int group, int block_size);
// How many CascadeAttention blocks one multiprocessor of the current
// device holds at once (at least 1).
int CascadeAttentionBlocksPerSm(int head_dim);

// Prefill attention of one sequence's chunk through GEMMs: these gather the
// operands and apply the causal softmax around two batched GEMMs.
//   kc, vc [n_kv][n_keys][hd] (bf16) <- the sequence's positions [key0, key0 + n_keys)
int GatherKv(const void* k_cache, const void* v_cache, KvCache cache, const int32_t* table,
             int key0, int n_keys, int n_kv, int head_dim, int block_size, uint16_t* kc,
             uint16_t* vc, void* stream);
//   qh [n_head][n][hd] (bf16) <- q [n rows from row0, n_head*hd] (fp32)
int GatherHeads(const float* q, int row0, int n, int n_head, int head_dim, uint16_t* qh,
                void* stream);
//   p[r, :] = bf16(softmax(s[r, :] over keys <= key0 + (r % n))), r < rows;
//   keys after that get probability 0, and with window > 0 so do keys
//   window or more before it (sliding window).
int CausalSoftmax(const float* s, int rows, int n, int n_keys, int key0, int window, uint16_t* p,
                  void* stream);
//   out [row0 + t, h*hd + d] <- oh [h][t][d], t < n
int ScatterHeads(const uint16_t* oh, int row0, int n, int n_head, int head_dim, uint16_t* out,
                 void* stream);

// y[m, :] (+)= w x[m, :] for m < rows (rows <= kGemvMaxRows): a
// matrix-vector product that reads the bf16 matrix w [n, k] once for all
// rows (k a multiple of 8), for decode steps of a few tokens. x is bf16
// [rows, k], y fp32 [rows, n].
constexpr int kGemvMaxRows = 4;
struct GemvArgs {
  const uint16_t* w = nullptr;
  const uint16_t* x = nullptr;
  float* y = nullptr;
  int rows = 1, n = 0, k = 0;
  bool accumulate = false;
  // RMSNorm fused in front: with xf set, x is bf16(xf / rms(xf) * norm)
  // computed here from the fp32 rows xf [rows, k] (x is then unused).
  const float* xf = nullptr;
  const float* norm = nullptr;
  float eps = 0;
  // The gate fused behind: with act set, rows 2j and 2j + 1 of w are a gate
  // and an up projection and act[m, j] = bf16(gate(y[m, 2j]) * y[m, 2j + 1])
  // is written instead of y (n a multiple of 8, act [rows, n / 2]).
  uint16_t* act = nullptr;
  Gate gate = Gate::kSilu;
  int depth = 4;  // 16-byte pieces of w in flight per lane: 4 or 8
  // Warps to an output row, each summing a slice of k: 1, 2 or 4. More
  // give a matrix with few rows work for every resident warp.
  int split = 1;
  // FP8 weights: with w8 set, the matrix is e4m3 [n, k] (k a multiple of
  // 16) whose row r stands for w8[r, :] * w_scale[r]; w is then unused.
  // (Decode steps of one or two tokens: unlike GemvFp8, x stays bf16.)
  const uint8_t* w8 = nullptr;
  const float* w_scale = nullptr;
  // RoPE and the K/V store fused behind (rope.n_head > 0, no act): w is a
  // layer's Q, K and V rows and, instead of y, each token's rotated Q goes
  // to rope.q and its K and V to rope's caches, exactly as RopeStoreKv
  // stores them from y (rope.qkv unused, rope.n == rows). The rows are
  // taken in the pairs that rotate together (split halves: dimensions i and
  // i + n_rot / 2 of a head), so that both products meet in one block.
  RopeKvArgs rope;
};
int Gemv(const GemvArgs& a, void* stream);

// Every layer of a decode step of one token in one persistent launch (batch
// 1): a block per multiprocessor, each with a loader warp that streams the
// block's share of every layer's matrices (its rows of Q/K/V, Wo, gate/up
// and down, in that order, layer after layer) into a ring of shared-memory
// stages by bulk copies, running ahead of the arithmetic as far as the ring
// allows, and eight warps that take each stage's rows against the phase's
// input once the phase's dependence is met (counters in global memory, no
// grid barrier): Q/K/V after the last layer's down rows, the attention of a
// KV head after every Q/K/V row, Wo after every head, gate/up after Wo,
// down after gate/up. So the weights keep streaming while a block waits.
// The RMSNorms go in front of Q/K/V and gate/up (each block normalizes the
// residual into its shared memory), SwiGLU behind gate/up, Wo and down add
// into the residual x, and the attention blocks (a KV head's key range
// each) rotate Q and K themselves, store the token's K and V (the last
// range), attend with every query head of their KV head on CUDA cores, and
// merge their ranges (the last to finish). The Llama block only: no biases,
// q/k norms, post norms or windows; bf16 weights.
struct DecodeLayer {
  const uint16_t* wqkv = nullptr;    // [(n_head + 2 n_kv) hd, d]
  const uint16_t* wo = nullptr;      // [d, n_head hd]
  const uint16_t* wgu = nullptr;     // [2 n_ff, d]: gate and up rows interleaved (2j, 2j + 1)
  const uint16_t* wdown = nullptr;   // [d, n_ff]
  const float* attn_norm = nullptr;  // [d]
  const float* ffn_norm = nullptr;   // [d]
  void* k_cache = nullptr;           // the layer's K and V
  void* v_cache = nullptr;
};
struct DecodeLayersArgs {
  const DecodeLayer* layers = nullptr;  // device memory, [n_layer]
  int n_layer = 0;
  float* x = nullptr;  // [d] the residual: in, the embedded token; out, after the last layer
  // Workspace: qkv [(n_head + 2 n_kv) hd] fp32, att [n_head hd] and act
  // [n_ff] bf16, partial [n_kv * kDecodeLayersRanges * group * (hd + 2)],
  // counters [DecodeLayersCounters(n_layer, n_kv)] zero, left zero.
  float* qkv = nullptr;
  uint16_t* att = nullptr;
  uint16_t* act = nullptr;
  float* partial = nullptr;
  int* counters = nullptr;
  // The token is tokens[0], with DecodeAttentionArgs's regions.
  const int32_t* tokens = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* slot = nullptr;
  const int32_t* tok_seq = nullptr;
  const int32_t* seq_table = nullptr;
  const int32_t* tables = nullptr;
  const float* inv_freq = nullptr;
  KvCache cache = KvCache::kBf16;
  int d = 0, n_head = 0, n_kv = 0, head_dim = 0, n_rot = 0, n_ff = 0, block_size = 0;
  bool neox = false;
  Gate gate = Gate::kSilu;
  float eps = 0, scale = 0;
  int range_keys = 32;  // the fewest keys an attention block takes (ranges below that merge)
  // For measuring (cuda_layers_bench): the ring's stages (0: as many as
  // fit), and no_waits, where no phase waits for another (the results are
  // wrong; the weights' stream is timed alone).
  int stages = 0;
  bool no_waits = false;
  // The products on tensor cores (mma.sync, fp32 accumulation) instead of
  // FMAs on CUDA cores.
  bool tensor_cores = false;
  // trace (null: off): the global timer (ns) at each of a layer's
  // kDecodeLayersMarks points, [n_layer][kDecodeLayersMarks][blocks];
  // blocks = the multiprocessors of the device.
  int64_t* trace = nullptr;
};
inline constexpr int kDecodeLayersRanges = 32;
// The points a trace marks in each layer, in order: start, down of the
// last layer met, input normed, Q/K/V rows summed, Q/K/V met and keys
// attended (in the blocks that attend; elsewhere both as the last), the
// range written or merged (attention done, or skipped), attention met, Wo
// done, Wo met, gate/up done, gate/up met, down done.
inline constexpr int kDecodeLayersMarks = 13;
inline int DecodeLayersCounters(int n_layer, int n_kv) { return n_layer * (5 + n_kv) + 1; }
// Whether DecodeLayers runs this shape on the current device (head_dim 64
// or 128, group <= 8, d, n_head hd and n_ff multiples of 256, n_rot even,
// enough shared memory); "" when it does, else why not.
const char* DecodeLayersRefusal(int d, int n_head, int n_kv, int head_dim, int n_rot, int n_ff);
int DecodeLayers(const DecodeLayersArgs& a, void* stream);

// keys[r] = the largest over i < n of (the order-preserving bits of
// x[r, i]) << 32 | ~(index0 + i), or all ones where the row holds a value
// not finite, r < rows: ArgmaxKeyIndex(keys[r]) is the index (index0 + i)
// of the row's largest value (the first on ties; -1 where not finite), and
// for a row whose columns lie in several slices, each with its index0, the
// largest of the slices' keys is the whole row's. `scratch`: 2 * rows
// words, zero before the call (cudaMemset once) and left zero after it.
int ArgmaxRows(const float* x, int rows, int n, int index0, uint64_t* keys, uint64_t* scratch,
               void* stream);
inline int32_t ArgmaxKeyIndex(uint64_t key) {
  return key == ~uint64_t{0} ? -1 : static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
}

// The k largest of each row x[r, 0..n), r < rows, in descending order (ties:
// the lower index first), into ids[r, 0..k) and vals[r, 0..k); a row holding
// a NaN or an infinity gets ids[r, 0] = -1. k in [1, min(kTopKMax, n)].
inline constexpr int kTopKMax = 64;
int TopKRows(const float* x, int rows, int n, int k, int32_t* ids, float* vals, void* stream);

// FP8 (e4m3) rows with a scale each: scale[r] = max|w[r, :]| / 448 (1 for
// a zero row), q[r, j] = e4m3(w[r, j] / scale[r]) (saturating), for r < n.
// Layer weights at load, and activations before an FP8 product.
int QuantizeRowsFp8(const uint16_t* w, int64_t n, int k, uint8_t* q, float* scale, void* stream);
// The same of x's fp32 rows RMS-normalized with `norm` (x / rms(x) * norm).
int QuantizeNormRowsFp8(const float* x, const float* norm, float eps, int n, int k, uint8_t* q,
                        float* scale, void* stream);

// y[m, :] (+)= (x[m, :] * x_scale[m]) (w * w_scale)^T for m < rows, on FP8
// tensor cores: e4m3 weights w [n, k] with a scale per row, e4m3
// activations x [rows, k] with a scale per row (QuantizeRowsFp8), fp32 y
// [rows, n]. With act set, the gate of GemvArgs::act is written instead of
// y. n a multiple of 8, k of 64. For decode steps of 3 to 16 tokens (one
// or two run faster through Gemv with w8, whose x needs no quantizing).
constexpr int kGemvFp8MaxRows = 16;
struct GemvFp8Args {
  const uint8_t* w = nullptr;
  const float* w_scale = nullptr;
  const uint8_t* x = nullptr;
  const float* x_scale = nullptr;
  float* y = nullptr;
  int rows = 1, n = 0, k = 0;
  bool accumulate = false;
  uint16_t* act = nullptr;
  Gate gate = Gate::kSilu;
};
int GemvFp8(const GemvFp8Args& a, void* stream);
// w[r, j] = bf16(q[r, j] * scale[r]) (k even).
int DequantizeRowsFp8(const uint8_t* q, const float* scale, int64_t n, int k, uint16_t* w,
                      void* stream);

// dst[i] = bf16(src[i]).
int F32ToBf16(const float* src, int64_t n, uint16_t* dst, void* stream);

}  // namespace braid::kernels::cuda
