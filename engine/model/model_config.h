// The hyper-parameters of a model, whatever file it came from: its block's
// ops (block.h, as its family writes them), their sizes and parameters.
#pragma once

#include <string>
#include <vector>

#include "model/block.h"

namespace braid {

enum class Arch { kLlama, kMistral, kQwen2, kQwen3, kGemma3 };
const char* ArchName(Arch a);

struct RopeScaling {
  // Llama 3 frequency scaling ("rope_type": "llama3"); factor 0 means none.
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_context = 8192;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // n_embd / n_head unless the file says otherwise
  int n_ff = 0;
  int n_ctx = 0;  // trained context length
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  int n_rot = 0;  // rotated dimensions per head (= head_dim)
  RopeScaling rope_scaling;
  // GGUF llama files store Q/K permuted for adjacent-pair rotation; HF
  // checkpoints and qwen2 rotate split halves ("neox").
  bool rope_neox = false;
  bool qkv_bias = false;         // qwen2
  bool tied_embeddings = false;  // output head reuses token_embd

  // The ops every layer runs, in order: the family's block (block.h).
  std::vector<BlockOp> block{LlamaBlock().begin(), LlamaBlock().end()};
  // Parameters of ops (each a feature a backend must implement:
  // RequiredOps in family.h).
  float embed_scale = 1.0f;  // embeddings multiplied by this (Gemma: sqrt(n_embd))
  float attn_scale = 0.0f;   // scores' scale; 0: 1 / sqrt(head_dim)
  // Added to every norm weight as it is read (Gemma checkpoints store w - 1;
  // its GGUF files store w).
  float norm_offset = 0.0f;
  // Sliding-window attention: layer i attends to the last `sliding_window`
  // positions (its own included) where sliding[i], and rotates with
  // rope_local_base instead of rope_base, unscaled. Empty: every layer global.
  int sliding_window = 0;
  std::vector<bool> sliding;
  float rope_local_base = 0.0f;

  bool Has(Op op) const;
  // The gate op's activation (SiLU where the block has none).
  Activation GateActivation() const;
  bool Sliding(int layer) const {
    return layer < static_cast<int>(sliding.size()) && sliding[layer];
  }
  // How many layers slide when some do and some do not (Gemma 3), else 0:
  // the layers whose KV a backend may keep apart, in slides.
  int PartlySlidingLayers() const {
    int n = 0;
    for (int i = 0; i < n_layer; ++i) n += Sliding(i);
    return n < n_layer ? n : 0;
  }
  // The positions any layer's attention looks back: sliding_window when
  // every layer slides, else 0 (no limit).
  int AttentionWindow() const {
    for (int i = 0; i < n_layer; ++i)
      if (!Sliding(i)) return 0;
    return n_layer > 0 ? sliding_window : 0;
  }
  float AttnScale() const;
};

// RoPE's inverse frequencies, base^(-2i/n_rot) for i < n_rot/2, with Llama 3
// frequency scaling when set: long wavelengths are divided by `factor`,
// short ones kept, the band between interpolated smoothly (Meta's reference
// implementation). Both backends rotate with these.
// `local`: the frequencies of sliding layers (rope_local_base, no scaling).
std::vector<float> RopeInverseFrequencies(const ModelConfig& c, bool local = false);

}  // namespace braid
