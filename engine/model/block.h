// A model's block as data: the ops every layer runs, in order, written once
// by the model's family (family.h) and carried by its ModelConfig. Backends
// do not write whole models: each implements steps (a run of ops it executes
// as one, fused as it likes: "norm then Q/K/V", "Wo, post norm, add") and
// plans a model's block into its own steps at load (PlanBlock). A block with
// an op, or an order of ops, that no step of a backend covers is refused
// then, naming the op, never run wrong.
//
// The ops work on a layer's named activations: x the residual stream, h a
// normalized copy of it, q/k/v, att the attention output, b a branch's
// output, g/u the gate and up products, a the gated activation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/status.h"

namespace braid {

// What a tensor is, whatever its name: backends map roles to their fields.
enum class TensorRole {
  // Global.
  kTokenEmbd,   // [n_vocab rows of n_embd]
  kOutputNorm,  // [n_embd]
  kOutput,      // [n_vocab, n_embd]; absent when the head reuses kTokenEmbd
  kRopeFreqs,   // [n_rot / 2] per-frequency divisors (Llama 3.1 GGUFs)
  // Per layer.
  kAttnNorm,      // [n_embd]
  kWq,            // [n_head * head_dim, n_embd] (rows = outputs)
  kWk,            // [n_head_kv * head_dim, n_embd]
  kWv,            // [n_head_kv * head_dim, n_embd]
  kWo,            // [n_embd, n_head * head_dim]
  kBq,            // [n_head * head_dim]
  kBk,            // [n_head_kv * head_dim]
  kBv,            // [n_head_kv * head_dim]
  kBo,            // [n_embd]
  kFfnNorm,       // [n_embd]
  kWGate,         // [n_ff, n_embd]
  kWUp,           // [n_ff, n_embd]
  kWDown,         // [n_embd, n_ff]
  kAttnQNorm,     // [head_dim], shared by every query head (the qk_norm op)
  kAttnKNorm,     // [head_dim], shared by every KV head (the qk_norm op)
  kPostAttnNorm,  // [n_embd] (a post_norm op)
  kPostFfnNorm,   // [n_embd] (a post_norm op)
};

// The feed-forward block's gate activation: a = act(g) * u.
enum class Activation {
  kSilu,      // SwiGLU (Llama, Qwen)
  kGeluTanh,  // GeGLU with tanh-approximated GELU (Gemma)
};

enum class Op : uint8_t {
  kNorm,       // h = rms(x) * weight
  kQkv,        // q, k, v = Wq h, Wk h, Wv h (plus biases where the model has them)
  kQkNorm,     // every head of q and k RMS-normalized (kAttnQNorm, kAttnKNorm)
  kRope,       // q, k rotated by position with the layer's frequencies; k, v stored
  kAttention,  // att = causal attention of q over the cache: all of it, or the
               // layer's sliding window (ModelConfig::Sliding)
  kWo,         // b = Wo att
  kPostNorm,   // b = rms(b) * weight
  kAdd,        // x += b
  kGateUp,     // g, u = Wgate h, Wup h
  kGate,       // a = act(g) * u
  kDown,       // b = Wdown a
};
// "norm", "qkv", "qk_norm", "rope", "attention", "wo", "post_norm", "add",
// "gate_up", "gate", "down".
const char* OpName(Op op);

struct BlockOp {
  Op op;
  // kNorm and kPostNorm: the norm's weight (the other ops name none).
  TensorRole weight = TensorRole::kAttnNorm;
  // kGate: its activation.
  Activation act = Activation::kSilu;
};

// The Llama block: pre-norm attention and SwiGLU feed-forward branches.
std::span<const BlockOp> LlamaBlock();
// "norm qkv rope attention wo add ...": the ops' names, for messages.
std::string BlockString(std::span<const BlockOp> block);
// The activation of the block's gate op (SiLU where it has none).
Activation GateActivation(std::span<const BlockOp> block);
// Whether an op of `block` reads the weight `role` (a norm's).
bool BlockReads(std::span<const BlockOp> block, TensorRole role);

// A backend's step: a run of ops it executes as one, `id` its own.
struct StepKind {
  int id;
  std::span<const Op> ops;
};
// Runs of ops both backends execute as one step (each declares which it
// has, under ids of its own).
namespace runs {
inline constexpr Op kNormQkv[] = {Op::kNorm, Op::kQkv};
inline constexpr Op kRopeAttention[] = {Op::kRope, Op::kAttention};
inline constexpr Op kQkNormRopeAttention[] = {Op::kQkNorm, Op::kRope, Op::kAttention};
inline constexpr Op kWoAdd[] = {Op::kWo, Op::kAdd};
inline constexpr Op kWoPostNormAdd[] = {Op::kWo, Op::kPostNorm, Op::kAdd};
inline constexpr Op kNormGateUp[] = {Op::kNorm, Op::kGateUp, Op::kGate};
inline constexpr Op kDownAdd[] = {Op::kDown, Op::kAdd};
inline constexpr Op kDownPostNormAdd[] = {Op::kDown, Op::kPostNorm, Op::kAdd};
}  // namespace runs

// A step of a planned block: its kind's id and the block's ops it covers.
struct PlannedStep {
  int id;
  std::span<const BlockOp> ops;
};
// `block` as a sequence of `steps`, the longest that matches at each op;
// InvalidArgument where a norm op names a weight that is no norm's.
// Unsupported, naming the first op no step covers where the block runs it,
// `model` ("gemma3") and `backend` ("the CPU backend"). The result's spans
// point into `block`.
Result<std::vector<PlannedStep>> PlanBlock(std::span<const BlockOp> block,
                                           std::span<const StepKind> steps,
                                           const std::string& model, const std::string& backend);

}  // namespace braid
