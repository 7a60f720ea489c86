// The forward pass of the Llama family (llama, mistral, qwen2):
//   h = x + Wo * attn(rope(Wq*rms(x)+bq), rope(Wk*rms(x)+bk), Wv*rms(x)+bv)
//   x = h + Wdown * (silu(Wgate*rms(h)) * Wup*rms(h))
// over a ragged batch of sequences (each a chunk of new tokens after its
// cached positions, its KV in a paged KvStore), as one parallel region on a
// thread pool: every stage splits its work between the threads and ends in a
// barrier.
//
// Batch invariance: the numbers computed for a token do not depend on which
// other tokens share its batch (every per-token reduction runs in the same
// order whatever the batch), so batched greedy decoding reproduces one
// sequence at a time exactly.
//
// Not thread-safe: one Forward at a time per LlamaForward.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/model.h"
#include "engine/status.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "model/model_config.h"
#include "runner/kv_store.h"
#include "runner/llama_weights.h"

namespace braid {

// One sequence's share of a batch.
struct BatchSegment {
  static constexpr int kNoLogits = 1 << 30;
  const int32_t* tokens = nullptr;  // the new tokens
  int n_tokens = 0;
  int pos0 = 0;                     // position of tokens[0]; positions < pos0 are in the store
  const int32_t* block_table = nullptr;  // blocks holding positions [0, pos0 + n_tokens)
  // Logits rows are produced for the new tokens at positions >= logits_from:
  // pos0 + n_tokens - 1 for the last token only, pos0 for all, kNoLogits for none.
  int logits_from = kNoLogits;
};

class LlamaForward {
 public:
  // `max_chunk`: most tokens per Forward call (callers split longer inputs);
  // `max_context`: the largest KV cache capacity Forward will be given.
  // Reads `options.exact`, `precision` and `kv_f16`.
  LlamaForward(const ModelConfig& config, const LlamaWeights& weights, kernels::ThreadPool& pool,
               const ModelOptions& options, int max_chunk, int max_context);

  int max_chunk() const { return max_chunk_; }
  // The element type KV stores given to Forward must have.
  kernels::KvType kv_type() const { return kv_type_; }
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

 private:
  void Embed(int tid, int n, const int32_t* tokens);
  void Normalize(int tid, int n, const std::vector<float>& w, const float* in, float* out);
  void Quantize(int tid, int n, int64_t cols, const float* in, kernels::DType weight_type,
                std::vector<uint8_t>& out);
  void MatMul(int tid, const kernels::MatrixView& w, int n, const float* x,
              const std::vector<uint8_t>& xq, float* y, int64_t ldy);
  void RopeAndStore(int tid, const LayerWeights& l, int layer, int n, KvStore& kv);
  void Attention(int tid, int layer, int n, const KvStore& kv);

  const ModelConfig& c_;
  const LlamaWeights& w_;
  kernels::ThreadPool& pool_;
  bool exact_;
  kernels::ActPrecision act_precision_;  // fast path's activation format
  kernels::KvType kv_type_;
  int max_chunk_;
  int q_dim_, kv_dim_;
  std::vector<float> inv_freq_;
  std::vector<float> rope_cos_, rope_sin_;  // [tokens of the batch, n_rot / 2]

  // Run state, [max_chunk, dim] each.
  std::vector<float> x_, xn_, q_, k_, v_, att_, h_, up_;
  std::vector<uint8_t> xq_, xq_k_, xq_v_, attq_, hq_;  // quantized activations
  std::vector<std::vector<float>> scratch_; // per thread: dequantized row / scores
  // Per token of the current batch: its position and its segment's block table.
  std::vector<int> pos_;
  std::vector<const int32_t*> table_;
  std::vector<int32_t> ids_;
  std::vector<int> out_rows_;               // tokens whose logits are wanted
};

}  // namespace braid
