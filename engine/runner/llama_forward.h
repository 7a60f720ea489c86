// The forward pass of the Llama family (llama, mistral, qwen2):
//   h = x + Wo * attn(rope(Wq*rms(x)+bq), rope(Wk*rms(x)+bk), Wv*rms(x)+bv)
//   x = h + Wdown * (silu(Wgate*rms(h)) * Wup*rms(h))
// over a chunk of tokens of one sequence, as one parallel region on a thread
// pool: every stage splits its work between the threads and ends in a barrier.
//
// Not thread-safe: one Forward at a time per LlamaForward.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/status.h"
#include "kernels/thread_pool.h"
#include "model/model_config.h"
#include "runner/kv_cache.h"
#include "runner/llama_weights.h"

namespace braid {

class LlamaForward {
 public:
  // `max_chunk`: most tokens per Forward call (callers split longer inputs);
  // `max_context`: the largest KV cache capacity Forward will be given.
  LlamaForward(const ModelConfig& config, const LlamaWeights& weights, kernels::ThreadPool& pool,
               bool exact, int max_chunk, int max_context);

  int max_chunk() const { return max_chunk_; }

  // Evaluates tokens[0..n) at positions pos0.. (n <= max_chunk, all ids valid,
  // pos0 + n <= kv.capacity()), writing K/V into `kv`. Logits go to `logits`:
  // all_logits ? [n, n_vocab] : [n_vocab] for the last token.
  void Forward(std::span<const int32_t> tokens, int pos0, KvCache& kv, bool all_logits,
               float* logits);

 private:
  void Embed(int tid, int n, const int32_t* tokens);
  void Normalize(int tid, int n, const std::vector<float>& w, const float* in, float* out);
  void Quantize(int tid, int n, int64_t cols, const float* in, kernels::DType weight_type,
                std::vector<uint8_t>& out);
  void MatMul(int tid, const kernels::MatrixView& w, int n, const float* x,
              const std::vector<uint8_t>& xq, float* y, int64_t ldy);
  void RopeAndStore(int tid, const LayerWeights& l, int layer, int n, int pos0, KvCache& kv);
  void Attention(int tid, int layer, int n, int pos0, const KvCache& kv);

  const ModelConfig& c_;
  const LlamaWeights& w_;
  kernels::ThreadPool& pool_;
  bool exact_;
  int max_chunk_;
  int q_dim_, kv_dim_;
  std::vector<float> inv_freq_;

  // Run state, [max_chunk, dim] each.
  std::vector<float> x_, xn_, q_, k_, v_, att_, h_, up_;
  std::vector<uint8_t> xq_, xq_k_, xq_v_, attq_, hq_;  // quantized activations
  std::vector<std::vector<float>> scratch_; // per thread: dequantized row / scores
};

}  // namespace braid
