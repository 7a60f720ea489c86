// The forward pass of a model's block (block.h), planned into this
// backend's steps (Plan), each a run of the block's ops:
//   norm, qkv                      h = rms(x); q, k, v = Wq h + bq, Wk h + bk, Wv h + bv
//   [qk_norm], rope, attention     per-head RMS norms of q and k, rotations
//                                  and K/V stores, attention (over a
//                                  sliding window on the layers that slide,
//                                  each kind of layer with its own RoPE
//                                  frequencies)
//   wo, [post_norm], add           x += [rms of] Wo att
//   norm, gate_up, gate            h = rms(x); a = act(Wgate h) * Wup h (SiLU or tanh-GELU)
//   down, [post_norm], add         x += [rms of] Wdown a
// over a ragged batch of sequences (each a chunk of new tokens after its
// cached positions, its KV in a paged KvStore), as one parallel region on a
// thread pool: every stage splits its work between the threads and ends in a
// barrier, or, for a batch of many sequences, each thread runs the whole pass
// over its own share of the sequences, with no barrier at all.
//
// Batch invariance: the numbers computed for a token do not depend on which
// other tokens share its batch (every per-token reduction runs in the same
// order whatever the batch), so batched greedy decoding reproduces one
// sequence at a time exactly.
//
// Not thread-safe: one Forward at a time per LlamaForward.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kv_store.h"
#include "backend/cpu/llama_weights.h"
#include "engine/model.h"
#include "engine/status.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "model/model_config.h"

namespace braid {

class LlamaForward {
 public:
  // `max_chunk`: most tokens per Forward call (callers split longer inputs);
  // `max_context`: the largest KV cache capacity Forward will be given.
  // Reads `options.exact`, `precision`, `kv_cache` and `profile_stages`.
  LlamaForward(const ModelConfig& config, const LlamaWeights& weights, kernels::ThreadPool& pool,
               const CpuOptions& options, int max_chunk, int max_context);

  // The steps below, and `config`'s block planned into them (Unsupported,
  // naming the op, for a block they do not cover).
  enum StepId { kStepNormQkv, kStepAttention, kStepWo, kStepNormGateUp, kStepDown };
  static Result<std::vector<PlannedStep>> Plan(const ModelConfig& config);

  int max_chunk() const { return max_chunk_; }
  // The element type of KV stores of `block_size` given to Forward: the one
  // asked for where the attention kernels read it natively, else fp16, else fp32.
  kernels::KvType KvTypeFor(int block_size) const {
    if (exact_ || kv_cache_ == CpuOptions::KvCache::kF32) return kernels::KvType::kF32;
    if (kv_cache_ == CpuOptions::KvCache::kQ8 && kernels::AttentionFastQ8(c_.head_dim, block_size))
      return kernels::KvType::kQ8;
    return kernels::AttentionFastF16(c_.head_dim) ? kernels::KvType::kF16 : kernels::KvType::kF32;
  }
  // Whether KV stores of `block_size` keep K tiles dimension-major (the fast
  // path, where the attention kernels read them natively).
  bool KTransposed(int block_size) const {
    return !exact_ && kernels::AttentionFastTransposedK(c_.head_dim, block_size);
  }

  // Evaluates every segment (total tokens <= max_chunk, ids valid, block
  // tables long enough), writing K/V into `kv`. Logits rows go to `logits`
  // in segment order: none, the last token's, or every token's, as each
  // segment asks ([rows, n_vocab]).
  void Forward(std::span<const BatchSegment> batch, KvStore& kv, float* logits);

  // Stages of a forward pass, as the profile (CpuOptions::profile_stages)
  // times them: each ends where the next begins.
  enum Stage {
    kStageNormQkv,    // RMS norm, quantization of the Q/K/V input (and the embedding)
    kStageQkv,        // Q, K, V matmuls
    kStageAttention,  // attention, with RoPE and the K/V stores
    kStageWo,         // quantization of the attention output, Wo, residual add
    kStageNormFfn,    // RMS norm, quantization of the FFN input
    kStageGateUp,     // gate and up matmuls, SwiGLU
    kStageDown,       // quantization of the FFN activations, down, residual add
    kStageWait,       // waiting for the other teams before the head
    kStageHead,       // output norm, quantization, the head matmul
    kStages
  };
  static const char* StageName(int stage);
  // Decode-only passes timed so far, and per thread the seconds per stage.
  uint64_t profiled_passes() const { return profiled_passes_; }
  const std::vector<double>& stage_seconds(int tid) const { return clocks_[tid].seconds; }

 private:
  // Threads computing a run of the batch's tokens together: `size` threads
  // (this one `index` among them, `tid` in the pool) over tokens [t0, t0 + n),
  // whose rows they use in every activation buffer. The layers run as one team
  // of all threads, or, for batches of many sequences, as one team per thread
  // (Teams()); the output head always as one team of all threads.
  struct Team {
    int tid = 0, index = 0, size = 1;
    int t0 = 0, n = 0;
  };
  // Splits the batch into teams: one per thread when it has whole segments to
  // give each thread about the same work, else one team of all threads.
  void Teams(std::span<const BatchSegment> batch);
  void Layers(const Team& tm, KvStore& kv, bool decode_only);
  void Head(const Team& all, float* logits);
  void Sync(const Team& tm) {
    if (tm.size > 1) pool_.Barrier();
  }
  // Profile: the stage that ends now, on thread `tid`.
  void EndStage(int tid, Stage s) {
    if (!timing_) return;
    ThreadClock& c = clocks_[tid];
    const auto now = std::chrono::steady_clock::now();
    c.seconds[s] += std::chrono::duration<double>(now - c.last).count();
    c.last = now;
  }
  void Embed(const Team& tm);
  void Normalize(const Team& tm, int n, const std::vector<float>& w, const float* in, float* out);
  void Quantize(const Team& tm, int n, const kernels::MatrixView& w, const float* in, uint8_t* out);
  uint8_t* QuantizedRows(const Team& tm, std::vector<uint8_t>& buf,
                         const kernels::MatrixView& w) const;
  void MatMulRows(const Team& tm, const kernels::MatrixView& w, int n, const float* x,
                  const uint8_t* xq, const uint8_t* prep, float* y, int64_t ldy, int64_t r0,
                  int64_t r1);
  void AddMatMulRows(const Team& tm, const kernels::MatrixView& w, const float* x,
                     const uint8_t* xq, const uint8_t* prep, int64_t r0, int64_t r1);
  // x += W in, or x += rms(W in) * post_norm where post_norm is not empty.
  void AddProjection(const Team& tm, const kernels::MatrixView& w, const float* in,
                     std::vector<uint8_t>& q_buf, uint8_t* prep,
                     const std::vector<float>& post_norm);
  // The team's region of a prepared buffer for rows of `cols` (nullptr on the exact path).
  uint8_t* PreparedFor(const Team& tm, std::vector<uint8_t>& prep, int64_t cols) const;
  bool Prepare(const Team& tm, int n, const kernels::MatrixView& w, const uint8_t* xq,
               uint8_t* prep);
  bool SharesPrepared(const kernels::MatrixView& w, const kernels::MatrixView& prepared_for) const;
  // Calls work(r0, r1) over this thread's share of [0, rows): one contiguous,
  // 16-row-aligned range per thread of the team. Measured against chunks that
  // free threads claim as they go: the static split decodes one sequence 12%
  // faster and 4 concurrent 1.12x faster (each thread streams one contiguous
  // share of the weights), prefills 512 tokens ~3% faster, and is as fast at
  // 16 concurrent; where the cores do not share a last-level cache, each
  // claim and each chunk's stray prefetches cost a transfer between them.
  template <typename F>
  void ForRows(const Team& tm, int64_t rows, F&& work) {
    int64_t r0, r1;
    kernels::ThreadPool::Split(rows, tm.size, tm.index, 16, &r0, &r1);
    if (r0 < r1) work(r0, r1);
  }
  // The RoPE angles of token t for layer `layer` (sliding layers have their own).
  const float* RopeCos(int layer, int t) const;
  const float* RopeSin(int layer, int t) const;
  // qk_norm: q and k normalized per head before they rotate.
  void RopeQuery(const LayerWeights& l, int layer, int t, int h, bool qk_norm);
  void RopeStoreKv(const LayerWeights& l, int layer, int t, int g, bool qk_norm, KvStore& kv);
  void RopeAndStore(const Team& tm, const LayerWeights& l, int layer, bool qk_norm, KvStore& kv);
  bool AttentionFuses(const Team& tm, bool decode_only) const;
  void Attention(const Team& tm, const LayerWeights& l, int layer, bool fused, bool qk_norm,
                 KvStore& kv);
  // The weight of norm op `i` of `step` (empty where that op is no norm).
  const std::vector<float>& NormOf(const LayerWeights& l, const PlannedStep& step, size_t i) const;

  const ModelConfig& c_;
  std::vector<PlannedStep> plan_;  // c_.block as steps
  const LlamaWeights& w_;
  kernels::ThreadPool& pool_;
  bool exact_;
  kernels::ActPrecision act_precision_;  // fast path's activation format
  CpuOptions::KvCache kv_cache_;
  int max_chunk_;
  int q_dim_, kv_dim_;
  std::vector<float> inv_freq_, inv_freq_local_;  // local: sliding layers' (empty if none)
  std::vector<float> rope_cos_, rope_sin_;        // [tokens of the batch, n_rot / 2]
  std::vector<float> rope_cos_local_, rope_sin_local_;

  // Run state, [max_chunk, dim] each.
  std::vector<float> x_, xn_, q_, k_, v_, att_, h_, up_;
  std::vector<uint8_t> xq_, xq_k_, xq_v_, attq_, hq_;  // quantized activations
  // Prepared activations (kernels::PrepareRows) of the inputs of Q/K/V and
  // gate/up (and the head), of Wo, of down.
  std::vector<uint8_t> prep_in_, prep_att_, prep_h_;
  // Work-sharing counters of the attention items, one per layer, reset at
  // each Forward.
  struct alignas(64) Claim {
    std::atomic<int64_t> next{0};
  };
  std::unique_ptr<Claim[]> claims_;
  std::vector<std::vector<float>> scratch_;  // per thread: dequantized row / scores
  // Per token of the current batch: its position and its segment's block table.
  std::vector<int> pos_;
  std::vector<const int32_t*> table_;
  std::vector<const int32_t*> slide_table_;  // per token; null without slides
  // Token t's table for layer `layer`: its slide table where kv keeps the
  // layer in slides.
  const int32_t* Table(const KvStore& kv, int layer, int t) const {
    return kv.InSlides(layer) ? slide_table_[t] : table_[t];
  }
  std::vector<int32_t> ids_;
  std::vector<int> out_rows_;  // tokens whose logits are wanted
  std::vector<Team> teams_;    // Teams(): one per thread, or one for all
  // Profile (CpuOptions::profile_stages): on, timing this pass, and each thread's clock.
  bool profile_ = false, timing_ = false;
  uint64_t profiled_passes_ = 0;
  struct alignas(64) ThreadClock {
    std::chrono::steady_clock::time_point last;
    std::vector<double> seconds = std::vector<double>(kStages);
  };
  std::vector<ThreadClock> clocks_;
};

}  // namespace braid
