// The hyper-parameters of a Llama-family model, whatever file it came from.
#pragma once

#include <string>
#include <vector>

namespace braid {

enum class Arch { kLlama, kMistral, kQwen2 };
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
};

// RoPE's inverse frequencies, base^(-2i/n_rot) for i < n_rot/2, with Llama 3
// frequency scaling when set: long wavelengths are divided by `factor`,
// short ones kept, the band between interpolated smoothly (Meta's reference
// implementation). Both backends rotate with these.
std::vector<float> RopeInverseFrequencies(const ModelConfig& c);

}  // namespace braid
