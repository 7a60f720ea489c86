// Llama (2, 3, 3.1; SmolLM2 and the like): pre-norm blocks of
//   h = x + Wo * attn(rope(Wq*rms(x)), rope(Wk*rms(x)), Wv*rms(x))
//   x = h + Wdown * (silu(Wgate*rms(h)) * Wup*rms(h))
// with grouped-query attention, no biases, RMS norms, SwiGLU, and the output
// head optionally tied to the embedding table. llama.cpp permutes Q/K rows in
// GGUF files for adjacent-pair rotation.
#include "model/family.h"

namespace braid {
namespace {

// Rows: role, GGUF name, Hugging Face name, shape (GGUF order), presence, read.
// clang-format off
constexpr TensorSpec kGlobals[] = {
  {TensorRole::kTokenEmbd,  "token_embd.weight",  "model.embed_tokens.weight", {Dim::kEmbd, Dim::kVocab},   Presence::kRequired,   true},
  {TensorRole::kOutputNorm, "output_norm.weight", "model.norm.weight",         {Dim::kEmbd, Dim::kNone},    Presence::kRequired,   true},
  {TensorRole::kOutput,     "output.weight",      "lm_head.weight",            {Dim::kEmbd, Dim::kVocab},   Presence::kUnlessTied, true},
  // Llama 3.1 GGUFs carry per-frequency rope divisors instead of scaling keys.
  {TensorRole::kRopeFreqs,  "rope_freqs.weight",  nullptr,                     {Dim::kHalfRot, Dim::kNone}, Presence::kOptional,   false},
};

constexpr TensorSpec kLayer[] = {
  {TensorRole::kAttnNorm, "attn_norm.weight",   "input_layernorm.weight",          {Dim::kEmbd, Dim::kNone}, Presence::kRequired, true},
  {TensorRole::kWq,       "attn_q.weight",      "self_attn.q_proj.weight",         {Dim::kEmbd, Dim::kQ},    Presence::kRequired, true},
  {TensorRole::kWk,       "attn_k.weight",      "self_attn.k_proj.weight",         {Dim::kEmbd, Dim::kKv},   Presence::kRequired, true},
  {TensorRole::kWv,       "attn_v.weight",      "self_attn.v_proj.weight",         {Dim::kEmbd, Dim::kKv},   Presence::kRequired, true},
  {TensorRole::kWo,       "attn_output.weight", "self_attn.o_proj.weight",         {Dim::kQ, Dim::kEmbd},    Presence::kRequired, true},
  {TensorRole::kBq,       "attn_q.bias",        "self_attn.q_proj.bias",           {Dim::kQ, Dim::kNone},    Presence::kQkvBias,  true},
  {TensorRole::kBk,       "attn_k.bias",        "self_attn.k_proj.bias",           {Dim::kKv, Dim::kNone},   Presence::kQkvBias,  true},
  {TensorRole::kBv,       "attn_v.bias",        "self_attn.v_proj.bias",           {Dim::kKv, Dim::kNone},   Presence::kQkvBias,  true},
  {TensorRole::kBo,       "attn_output.bias",   "self_attn.o_proj.bias",           {Dim::kEmbd, Dim::kNone}, Presence::kOptional, false},
  {TensorRole::kFfnNorm,  "ffn_norm.weight",    "post_attention_layernorm.weight", {Dim::kEmbd, Dim::kNone}, Presence::kRequired, true},
  {TensorRole::kWGate,    "ffn_gate.weight",    "mlp.gate_proj.weight",            {Dim::kEmbd, Dim::kFf},   Presence::kRequired, true},
  {TensorRole::kWUp,      "ffn_up.weight",      "mlp.up_proj.weight",              {Dim::kEmbd, Dim::kFf},   Presence::kRequired, true},
  {TensorRole::kWDown,    "ffn_down.weight",    "mlp.down_proj.weight",            {Dim::kFf, Dim::kEmbd},   Presence::kRequired, true},
};
// clang-format on

constexpr std::string_view kHfTypes[] = {"llama"};

}  // namespace

std::span<const TensorSpec> LlamaGlobalTensors() { return kGlobals; }
std::span<const TensorSpec> LlamaLayerTensors() { return kLayer; }

const Family& LlamaFamily() {
  static const Family f{
      .arch = Arch::kLlama,
      .gguf_arch = "llama",
      .hf_model_types = kHfTypes,
      .qkv_bias = false,
      .gguf_rope_neox = false,
      .globals = kGlobals,
      .layer = kLayer,
  };
  return f;
}

}  // namespace braid
