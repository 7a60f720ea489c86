// Gemma 3 (text): pre- and post-norm blocks of
//   h = x + rms_post(Wo * attn(rope(rms_q(Wq*rms(x))), rope(rms_k(Wk*rms(x))), Wv*rms(x)))
//   x = h + rms_post(Wdown * (gelu_tanh(Wgate*rms(h)) * Wup*rms(h)))
// with embeddings scaled by sqrt(n_embd), the head tied to the embedding
// table, and five sliding-window layers (window 512 in the small models, RoPE
// base 10k) to every global one (base 1M). Hugging Face checkpoints store
// norm weights as w - 1 (the norm multiplies by 1 + w); GGUF files store w.
#include "model/family.h"

namespace braid {
namespace {

// Rows: role, GGUF name, Hugging Face name, shape (GGUF order), presence, read.
// clang-format off
constexpr TensorSpec kLayer[] = {
  {TensorRole::kAttnNorm,     "attn_norm.weight",           "input_layernorm.weight",            {Dim::kEmbd, Dim::kNone}, Presence::kRequired, true},
  {TensorRole::kWq,           "attn_q.weight",              "self_attn.q_proj.weight",           {Dim::kEmbd, Dim::kQ},    Presence::kRequired, true},
  {TensorRole::kWk,           "attn_k.weight",              "self_attn.k_proj.weight",           {Dim::kEmbd, Dim::kKv},   Presence::kRequired, true},
  {TensorRole::kWv,           "attn_v.weight",              "self_attn.v_proj.weight",           {Dim::kEmbd, Dim::kKv},   Presence::kRequired, true},
  {TensorRole::kWo,           "attn_output.weight",         "self_attn.o_proj.weight",           {Dim::kQ, Dim::kEmbd},    Presence::kRequired, true},
  {TensorRole::kAttnQNorm,    "attn_q_norm.weight",         "self_attn.q_norm.weight",           {Dim::kHead, Dim::kNone}, Presence::kRequired, true},
  {TensorRole::kAttnKNorm,    "attn_k_norm.weight",         "self_attn.k_norm.weight",           {Dim::kHead, Dim::kNone}, Presence::kRequired, true},
  {TensorRole::kPostAttnNorm, "post_attention_norm.weight", "post_attention_layernorm.weight",   {Dim::kEmbd, Dim::kNone}, Presence::kRequired, true},
  {TensorRole::kFfnNorm,      "ffn_norm.weight",            "pre_feedforward_layernorm.weight",  {Dim::kEmbd, Dim::kNone}, Presence::kRequired, true},
  {TensorRole::kWGate,        "ffn_gate.weight",            "mlp.gate_proj.weight",              {Dim::kEmbd, Dim::kFf},   Presence::kRequired, true},
  {TensorRole::kWUp,          "ffn_up.weight",              "mlp.up_proj.weight",                {Dim::kEmbd, Dim::kFf},   Presence::kRequired, true},
  {TensorRole::kWDown,        "ffn_down.weight",            "mlp.down_proj.weight",              {Dim::kFf, Dim::kEmbd},   Presence::kRequired, true},
  {TensorRole::kPostFfnNorm,  "post_ffw_norm.weight",       "post_feedforward_layernorm.weight", {Dim::kEmbd, Dim::kNone}, Presence::kRequired, true},
};
// clang-format on

constexpr std::string_view kHfTypes[] = {"gemma3_text"};

constexpr BlockOp kBlock[] = {
    {Op::kNorm, TensorRole::kAttnNorm},
    {Op::kQkv},
    {Op::kQkNorm},
    {Op::kRope},
    {Op::kAttention},
    {Op::kWo},
    {Op::kPostNorm, TensorRole::kPostAttnNorm},
    {Op::kAdd},
    {Op::kNorm, TensorRole::kFfnNorm},
    {Op::kGateUp},
    {Op::kGate, {}, Activation::kGeluTanh},
    {Op::kDown},
    {Op::kPostNorm, TensorRole::kPostFfnNorm},
    {Op::kAdd},
};

}  // namespace

const Family& Gemma3Family() {
  static const Family f{
      .arch = Arch::kGemma3,
      .gguf_arch = "gemma3",
      .hf_model_types = kHfTypes,
      .qkv_bias = false,
      .gguf_rope_neox = true,
      .globals = LlamaGlobalTensors(),
      .layer = kLayer,
      .block = kBlock,
      .hf_activation_key = "hidden_activation",
      .embed_scaled = true,
      .hf_norm_offset = 1.0f,
      .gguf_swa_period = 6,
      .gguf_rope_local_base = 10000.0f,
  };
  return f;
}

}  // namespace braid
