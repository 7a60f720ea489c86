#include "model/family.h"

#include <algorithm>

namespace braid {

std::span<const Family* const> Families() {
  static const Family* const kAll[] = {&LlamaFamily(), &MistralFamily(), &Qwen2Family(),
                                       &Qwen3Family(), &Gemma3Family()};
  return kAll;
}

const Family* FindFamily(Arch arch) {
  for (const Family* f : Families())
    if (f->arch == arch) return f;
  return nullptr;
}

const Family* FindFamilyByGgufArch(std::string_view gguf_arch) {
  for (const Family* f : Families())
    if (gguf_arch == f->gguf_arch) return f;
  return nullptr;
}

const Family* FindFamilyByHfModelType(std::string_view model_type) {
  for (const Family* f : Families())
    for (std::string_view t : f->hf_model_types)
      if (model_type == t) return f;
  return nullptr;
}

std::string FamilyNames() {
  std::string out;
  for (const Family* f : Families()) out += (out.empty() ? "" : ", ") + std::string(f->gguf_arch);
  return out;
}

const TensorSpec* FindTensorSpec(const Family& family, TensorRole role) {
  for (std::span<const TensorSpec> list : {family.globals, family.layer})
    for (const TensorSpec& t : list)
      if (t.role == role) return &t;
  return nullptr;
}

std::string TensorName(const TensorSpec& spec, int layer) {
  if (layer < 0) return spec.gguf;
  return "blk." + std::to_string(layer) + "." + spec.gguf;
}

std::vector<int64_t> TensorShape(const TensorSpec& spec, const ModelConfig& c) {
  std::vector<int64_t> shape;
  for (Dim d : spec.shape) {
    switch (d) {
      case Dim::kNone:
        break;
      case Dim::kEmbd:
        shape.push_back(c.n_embd);
        break;
      case Dim::kVocab:
        shape.push_back(c.n_vocab);
        break;
      case Dim::kQ:
        shape.push_back(int64_t{c.n_head} * c.head_dim);
        break;
      case Dim::kKv:
        shape.push_back(int64_t{c.n_head_kv} * c.head_dim);
        break;
      case Dim::kFf:
        shape.push_back(c.n_ff);
        break;
      case Dim::kHalfRot:
        shape.push_back(c.n_rot / 2);
        break;
      case Dim::kHead:
        shape.push_back(c.head_dim);
        break;
    }
  }
  return shape;
}

bool TensorRequired(const TensorSpec& spec, const ModelConfig& c) {
  switch (spec.presence) {
    case Presence::kRequired:
      return true;
    case Presence::kOptional:
      return false;
    case Presence::kQkvBias:
      return c.qkv_bias;
    case Presence::kBlock:
      return BlockReads(c.block, spec.role);
    case Presence::kUnlessTied:
      return !c.tied_embeddings;
  }
  return true;
}

std::vector<std::string> RequiredOps(const ModelConfig& c, int context) {
  std::vector<std::string> ops;
  if (c.qkv_bias) ops.push_back("qkv_bias");
  if (c.GateActivation() == Activation::kGeluTanh) ops.push_back("gelu_tanh");
  if (c.embed_scale != 1.0f) ops.push_back("embed_scale");
  if (c.attn_scale > 0.0f) ops.push_back("attn_scale");
  if (c.sliding_window > 0 && (context <= 0 || c.sliding_window < context))
    ops.push_back("sliding_window");
  if (c.rope_scaling.factor > 0.0f) ops.push_back("rope_llama3");
  return ops;
}

Status CheckOps(const ModelConfig& c, int context, std::span<const std::string_view> supported,
                const std::string& backend) {
  for (const std::string& op : RequiredOps(c, context)) {
    if (std::find(supported.begin(), supported.end(), op) == supported.end())
      return Status::Unsupported(backend + " cannot run this " + ArchName(c.arch) +
                                 " model: it lacks the op '" + op + "'");
  }
  return Status::Ok();
}

}  // namespace braid
