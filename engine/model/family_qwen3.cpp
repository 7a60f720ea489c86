// Qwen3 (dense): the Llama block without biases, with an RMS norm over each
// query and key head before RoPE. GGUF files keep the Hugging Face Q/K layout
// and rotate split halves.
#include "model/family.h"

namespace braid {
namespace {

// Rows: role, GGUF name, Hugging Face name, shape (GGUF order), presence, read.
// clang-format off
constexpr TensorSpec kLayer[] = {
  {TensorRole::kAttnNorm,  "attn_norm.weight",   "input_layernorm.weight",          {Dim::kEmbd, Dim::kNone}, Presence::kRequired, true},
  {TensorRole::kWq,        "attn_q.weight",      "self_attn.q_proj.weight",         {Dim::kEmbd, Dim::kQ},    Presence::kRequired, true},
  {TensorRole::kWk,        "attn_k.weight",      "self_attn.k_proj.weight",         {Dim::kEmbd, Dim::kKv},   Presence::kRequired, true},
  {TensorRole::kWv,        "attn_v.weight",      "self_attn.v_proj.weight",         {Dim::kEmbd, Dim::kKv},   Presence::kRequired, true},
  {TensorRole::kWo,        "attn_output.weight", "self_attn.o_proj.weight",         {Dim::kQ, Dim::kEmbd},    Presence::kRequired, true},
  {TensorRole::kBq,        "attn_q.bias",        "self_attn.q_proj.bias",           {Dim::kQ, Dim::kNone},    Presence::kQkvBias,  true},
  {TensorRole::kBk,        "attn_k.bias",        "self_attn.k_proj.bias",           {Dim::kKv, Dim::kNone},   Presence::kQkvBias,  true},
  {TensorRole::kBv,        "attn_v.bias",        "self_attn.v_proj.bias",           {Dim::kKv, Dim::kNone},   Presence::kQkvBias,  true},
  {TensorRole::kAttnQNorm, "attn_q_norm.weight", "self_attn.q_norm.weight",         {Dim::kHead, Dim::kNone}, Presence::kBlock,    true},
  {TensorRole::kAttnKNorm, "attn_k_norm.weight", "self_attn.k_norm.weight",         {Dim::kHead, Dim::kNone}, Presence::kBlock,    true},
  {TensorRole::kFfnNorm,   "ffn_norm.weight",    "post_attention_layernorm.weight", {Dim::kEmbd, Dim::kNone}, Presence::kRequired, true},
  {TensorRole::kWGate,     "ffn_gate.weight",    "mlp.gate_proj.weight",            {Dim::kEmbd, Dim::kFf},   Presence::kRequired, true},
  {TensorRole::kWUp,       "ffn_up.weight",      "mlp.up_proj.weight",              {Dim::kEmbd, Dim::kFf},   Presence::kRequired, true},
  {TensorRole::kWDown,     "ffn_down.weight",    "mlp.down_proj.weight",            {Dim::kFf, Dim::kEmbd},   Presence::kRequired, true},
};
// clang-format on

constexpr std::string_view kHfTypes[] = {"qwen3"};

constexpr BlockOp kBlock[] = {
    {Op::kNorm, TensorRole::kAttnNorm},
    {Op::kQkv},
    {Op::kQkNorm},
    {Op::kRope},
    {Op::kAttention},
    {Op::kWo},
    {Op::kAdd},
    {Op::kNorm, TensorRole::kFfnNorm},
    {Op::kGateUp},
    {Op::kGate, {}, Activation::kSilu},
    {Op::kDown},
    {Op::kAdd},
};

}  // namespace

const Family& Qwen3Family() {
  static const Family f{
      .arch = Arch::kQwen3,
      .gguf_arch = "qwen3",
      .hf_model_types = kHfTypes,
      .qkv_bias = false,
      .gguf_rope_neox = true,
      .globals = LlamaGlobalTensors(),
      .layer = kLayer,
      .block = kBlock,
  };
  return f;
}

}  // namespace braid
