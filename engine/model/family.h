// Model families: what each architecture the engine runs states about its
// weights and its block, written once and read by the file loader
// (validation, Hugging Face -> GGUF names), the model's description and the
// backends' weight builders. One file per family (family_llama.cpp,
// family_mistral.cpp, family_qwen2.cpp, family_qwen3.cpp, family_gemma3.cpp),
// as llama.cpp's src/models/.
//
// A family writes its block once, as the ops every layer runs in order
// (block.h: which norms where, q/k norms, which gate activation), and the
// parameters its files do not state (scaled embeddings, which layers slide);
// the file loaders copy them into the model's ModelConfig. Backends plan the
// block into their own steps (PlanBlock) and refuse one they cannot run,
// naming the op; the ops' parameters are features a backend has or lacks
// (RequiredOps, CheckOps), refused by name too.
//
// A family is plain constant data: its names, its block, and
// two tensor lists (the model's global tensors, then each layer's). Lists
// are in the order validation checks them, so the first missing or misshaped
// tensor named in an error is always the same.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"
#include "model/model_config.h"

namespace braid {

// One dimension of a tensor's shape, as a function of the config.
enum class Dim { kNone, kEmbd, kVocab, kQ, kKv, kFf, kHalfRot, kHead };

// When a tensor must be present.
enum class Presence {
  kRequired,
  kOptional,    // validated when present
  kQkvBias,     // required when ModelConfig::qkv_bias, else optional
  kUnlessTied,  // required unless ModelConfig::tied_embeddings
  kBlock,       // required when an op of the block reads it (BlockReads)
};

struct TensorSpec {
  TensorRole role;
  // GGUF name; per-layer tensors: the part after "blk.N.".
  const char* gguf;
  // Hugging Face name; per-layer tensors: the part after "model.layers.N.";
  // nullptr when checkpoints never carry it.
  const char* hf;
  // Shape in GGUF order (innermost first): [cols, rows] for a matrix,
  // [n, kNone] for a vector.
  Dim shape[2];
  Presence presence;
  // Whether the forward pass reads it (else it is only validated).
  bool read;
};

struct Family {
  Arch arch;
  const char* gguf_arch;                             // GGUF general.architecture, also ArchName
  std::span<const std::string_view> hf_model_types;  // config.json "model_type"
  // Q, K and V projections carry biases (Hugging Face checkpoints; a GGUF
  // file says so by having them).
  bool qkv_bias;
  // GGUF files rotate split halves ("neox"); false: adjacent pairs, llama.cpp
  // having permuted Q/K rows. Hugging Face checkpoints always rotate halves.
  bool gguf_rope_neox;
  std::span<const TensorSpec> globals;
  std::span<const TensorSpec> layer;
  // The ops every layer runs, in order (block.h).
  std::span<const BlockOp> block = LlamaBlock();
  const char* hf_activation_key = "hidden_act";  // config.json key naming the gate's
  bool embed_scaled = false;                     // embeddings times sqrt(n_embd)
  float hf_norm_offset = 0.0f;
  // GGUF files do not say which layers slide: every swa_period-th layer is
  // global, the others slide with base rope_local_base (0: none slide).
  int gguf_swa_period = 0;
  float gguf_rope_local_base = 0.0f;
  // config.json's "sliding_window" (when not null) makes every layer slide,
  // with the global RoPE base (Mistral 7B v0.1).
  bool hf_window_all_layers = false;
};

// The features a model's ops need beyond their plain forms (RMS norms, GQA
// attention with RoPE, SwiGLU), by name: "qkv_bias", "gelu_tanh",
// "embed_scale", "attn_scale", "sliding_window", "rope_llama3".
// A window no shorter than `context` (the positions a sequence may hold;
// 0: unknown) never limits attention, so it needs no op.
std::vector<std::string> RequiredOps(const ModelConfig& config, int context = 0);
// Unsupported, naming the first op `config` needs at `context` that is not
// in `supported`, the model's family and `backend` ("the CUDA backend"); Ok
// when it has every op.
Status CheckOps(const ModelConfig& config, int context, std::span<const std::string_view> supported,
                const std::string& backend);

// Every family, in the order error messages list them.
std::span<const Family* const> Families();
// nullptr when the engine has no such family.
const Family* FindFamily(Arch arch);
const Family* FindFamilyByGgufArch(std::string_view gguf_arch);
const Family* FindFamilyByHfModelType(std::string_view model_type);
// "llama, mistral, qwen2": the GGUF names, for error messages.
std::string FamilyNames();

// The family's spec for `role`; nullptr when its models have no such tensor.
const TensorSpec* FindTensorSpec(const Family& family, TensorRole role);
// The GGUF name of a global tensor (layer < 0) or of layer `layer`'s.
std::string TensorName(const TensorSpec& spec, int layer = -1);
// The shape the config implies, in GGUF order.
std::vector<int64_t> TensorShape(const TensorSpec& spec, const ModelConfig& config);
bool TensorRequired(const TensorSpec& spec, const ModelConfig& config);

// One per family file.
const Family& LlamaFamily();
const Family& MistralFamily();
const Family& Qwen2Family();
const Family& Qwen3Family();
const Family& Gemma3Family();
// The Llama block's tensors, which mistral and qwen2 share (family_llama.cpp).
std::span<const TensorSpec> LlamaGlobalTensors();
std::span<const TensorSpec> LlamaLayerTensors();

}  // namespace braid
