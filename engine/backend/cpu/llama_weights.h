// The weights of a model as views into the mapped file, plus fp32 copies of
// the small vectors (norms, with ModelConfig::norm_offset added, and biases).
#pragma once

#include <memory>
#include <vector>

#include "engine/status.h"
#include "kernels/matmul.h"
#include "model/model_file.h"

namespace braid {

struct LayerWeights {
  std::vector<float> attn_norm;        // [n_embd]
  kernels::MatrixView wq, wk, wv, wo;  // [n_head*hd, n_embd] ... (rows = outputs)
  std::vector<float> bq, bk, bv;       // qwen2 only; empty otherwise
  std::vector<float> q_norm, k_norm;   // [head_dim] (qk_norm); empty otherwise
  std::vector<float> post_attn_norm;   // [n_embd] (post_norms); empty otherwise
  std::vector<float> ffn_norm;         // [n_embd]
  std::vector<float> post_ffn_norm;    // [n_embd] (post_norms); empty otherwise
  kernels::MatrixView w_gate, w_up;    // [n_ff, n_embd]
  kernels::MatrixView w_down;          // [n_embd, n_ff]
};

struct LlamaWeights {
  const TensorInfo* token_embd = nullptr;  // [n_vocab rows of n_embd]
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;  // [n_embd]
  kernels::MatrixView output;      // [n_vocab, n_embd]; token_embd when tied
  // Interleaved copies that views point into (InterleaveForFastPath).
  std::shared_ptr<uint8_t> packed;
  // Q8_0 copies of the file's Q5_0 matrices (views point into them).
  std::vector<std::shared_ptr<uint8_t[]>> repacked;
};

// Where a layer keeps the fp32 vector of `role` (a norm's weight, a bias);
// nullptr for a role it keeps as a matrix or not at all.
std::vector<float>* LayerVector(LayerWeights& l, TensorRole role);
const std::vector<float>* LayerVector(const LayerWeights& l, TensorRole role);

// Builds views over `file` (which must outlive the result). Errors name the
// tensor whose type the kernels cannot multiply.
Result<LlamaWeights> BuildLlamaWeights(const ModelFile& file);

// Fast path only: points every matrix that the kernels in use multiply faster
// interleaved (kernels::InterleaveFast: Q4_1 and Q8_0 with AVX-512 VNNI) at an
// owned interleaved copy. The file's bytes stay as they are (the embedding
// rows are still read from them).
void InterleaveForFastPath(LlamaWeights* w);

}  // namespace braid
