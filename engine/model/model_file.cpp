// LoadModelFile: a GGUF file, or a Hugging Face checkpoint (config.json plus
// safetensors), turned into one ModelConfig and one tensor table under GGUF
// names. Key names and defaults: docs/formats.md.
#include "model/model_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "kernels/quant.h"
#include "model/family.h"
#include "model/gguf_reader.h"
#include "model/safetensors_reader.h"

namespace braid {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Sanity bounds on hyper-parameters: far above any Llama-family model, low
// enough that products like n_layer * n_ctx * kv_dim cannot overflow int64.
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxEmbd = int64_t{1} << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxFf = int64_t{1} << 18;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxContext = int64_t{1} << 24;
constexpr uint64_t kMaxConfigJsonBytes = 16 << 20;

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A GGUF architecture or a config.json model_type that names no family.
Status UnsupportedFamily(const std::string& path, const char* field, const std::string& name) {
  return Status::Unsupported(path + ": " + field + " '" + name + "' is not supported (" +
                             FamilyNames() + ")");
}

// ---- GGUF ----------------------------------------------------------------------

// Reads an integer key, NotFound-free: `fallback` when absent (nullopt: required).
Result<int64_t> GgufInt(const GgufFile& g, const std::string& key, std::optional<int64_t> fallback,
                        int64_t lo, int64_t hi) {
  if (g.Find(key) == nullptr) {
    if (fallback) return *fallback;
    return Status::Corruption(g.path() + ": missing key '" + key + "'");
  }
  Result<int64_t> v = g.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v < lo || *v > hi) {
    return Status::Corruption(g.path() + ": key '" + key + "' is " + std::to_string(*v) +
                              ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return *v;
}

Result<double> GgufPositiveFloat(const GgufFile& g, const std::string& key, double fallback) {
  if (g.Find(key) == nullptr) return fallback;
  Result<double> v = g.GetFloat(key);
  if (!v.ok()) return v.status();
  if (!std::isfinite(*v) || *v <= 0) {
    return Status::Corruption(g.path() + ": key '" + key + "' is " + std::to_string(*v) +
                              ", expected a positive number");
  }
  return *v;
}

Status GgufRopeScaling(const GgufFile& g, const std::string& p, ModelConfig* c) {
  const std::string type_key = p + "rope.scaling.type";
  if (g.Find(type_key) == nullptr) return Status::Ok();
  BRAID_ASSIGN_OR_RETURN(std::string type, g.GetString(type_key));
  BRAID_ASSIGN_OR_RETURN(double factor, GgufPositiveFloat(g, p + "rope.scaling.factor", 1.0));
  if (type == "none" || (type == "linear" && factor == 1.0)) return Status::Ok();
  if (type != "llama3") {
    return Status::Unsupported(g.path() + ": rope scaling type '" + type + "' is not supported");
  }
  c->rope_scaling.factor = static_cast<float>(factor);
  BRAID_ASSIGN_OR_RETURN(double low, GgufPositiveFloat(g, p + "rope.scaling.low_freq_factor", 1.0));
  BRAID_ASSIGN_OR_RETURN(double high,
                         GgufPositiveFloat(g, p + "rope.scaling.high_freq_factor", 4.0));
  BRAID_ASSIGN_OR_RETURN(
      int64_t orig, GgufInt(g, p + "rope.scaling.original_context_length", 8192, 1, kMaxContext));
  c->rope_scaling.low_freq_factor = static_cast<float>(low);
  c->rope_scaling.high_freq_factor = static_cast<float>(high);
  c->rope_scaling.original_context = static_cast<int>(orig);
  return Status::Ok();
}

// The block's traits that the family fixes, whatever the file.
void FamilyTraits(const Family& family, ModelConfig* c) {
  c->block.assign(family.block.begin(), family.block.end());
  if (family.embed_scaled) c->embed_scale = std::sqrt(static_cast<float>(c->n_embd));
}

Result<ModelConfig> ConfigFromGguf(const GgufFile& g) {
  ModelConfig c;
  if (g.Find("general.architecture") == nullptr) {
    return Status::Corruption(g.path() + ": missing key 'general.architecture'");
  }
  BRAID_ASSIGN_OR_RETURN(std::string arch, g.GetString("general.architecture"));
  const Family* family = FindFamilyByGgufArch(arch);
  if (family == nullptr) return UnsupportedFamily(g.path(), "architecture", arch);
  c.arch = family->arch;
  const std::string p = arch + ".";
  BRAID_ASSIGN_OR_RETURN(int64_t n_ctx,
                         GgufInt(g, p + "context_length", std::nullopt, 1, kMaxContext));
  BRAID_ASSIGN_OR_RETURN(int64_t n_embd,
                         GgufInt(g, p + "embedding_length", std::nullopt, 1, kMaxEmbd));
  BRAID_ASSIGN_OR_RETURN(int64_t n_layer,
                         GgufInt(g, p + "block_count", std::nullopt, 1, kMaxLayers));
  BRAID_ASSIGN_OR_RETURN(int64_t n_ff,
                         GgufInt(g, p + "feed_forward_length", std::nullopt, 1, kMaxFf));
  BRAID_ASSIGN_OR_RETURN(int64_t n_head,
                         GgufInt(g, p + "attention.head_count", std::nullopt, 1, kMaxHeads));
  BRAID_ASSIGN_OR_RETURN(int64_t n_head_kv,
                         GgufInt(g, p + "attention.head_count_kv", n_head, 1, kMaxHeads));
  if (g.Find(p + "attention.key_length") == nullptr && n_embd % n_head != 0) {
    return Status::Corruption(g.path() + ": embedding_length " + std::to_string(n_embd) +
                              " is not a multiple of head_count " + std::to_string(n_head));
  }
  BRAID_ASSIGN_OR_RETURN(int64_t head_dim,
                         GgufInt(g, p + "attention.key_length", n_embd / n_head, 1, kMaxHeadDim));
  BRAID_ASSIGN_OR_RETURN(int64_t v_dim,
                         GgufInt(g, p + "attention.value_length", head_dim, 1, kMaxHeadDim));
  if (v_dim != head_dim) {
    return Status::Unsupported(g.path() + ": attention.value_length " + std::to_string(v_dim) +
                               " differs from key_length " + std::to_string(head_dim));
  }
  BRAID_ASSIGN_OR_RETURN(int64_t n_rot,
                         GgufInt(g, p + "rope.dimension_count", head_dim, 1, kMaxHeadDim));
  BRAID_ASSIGN_OR_RETURN(double base, GgufPositiveFloat(g, p + "rope.freq_base", 10000.0));
  BRAID_ASSIGN_OR_RETURN(double eps,
                         GgufPositiveFloat(g, p + "attention.layer_norm_rms_epsilon", 1e-5));

  // Vocabulary size: the explicit key, else the token list, else the embedding.
  int64_t n_vocab = 0;
  const GgufValue* tokens = g.Find("tokenizer.ggml.tokens");
  const TensorInfo* embd = g.FindTensor("token_embd.weight");
  if (g.Find(p + "vocab_size") != nullptr) {
    BRAID_ASSIGN_OR_RETURN(n_vocab, GgufInt(g, p + "vocab_size", std::nullopt, 1, kMaxVocab));
  } else if (tokens != nullptr && std::holds_alternative<std::vector<std::string>>(tokens->value)) {
    n_vocab = static_cast<int64_t>(std::get<std::vector<std::string>>(tokens->value).size());
  } else if (embd != nullptr && embd->shape.size() == 2) {
    n_vocab = embd->shape[1];
  } else {
    return Status::Corruption(g.path() + ": cannot tell the vocabulary size (no " + p +
                              "vocab_size, token list or token_embd.weight)");
  }

  c.n_vocab = static_cast<int>(std::min(n_vocab, kMaxVocab + 1));  // CheckConfig reports it
  c.n_embd = static_cast<int>(n_embd);
  c.n_layer = static_cast<int>(n_layer);
  c.n_head = static_cast<int>(n_head);
  c.n_head_kv = static_cast<int>(n_head_kv);
  c.head_dim = static_cast<int>(head_dim);
  c.n_ff = static_cast<int>(n_ff);
  c.n_ctx = static_cast<int>(n_ctx);
  c.rms_eps = static_cast<float>(eps);
  c.rope_base = static_cast<float>(base);
  c.n_rot = static_cast<int>(n_rot);
  BRAID_RETURN_IF_ERROR(GgufRopeScaling(g, p, &c));
  // llama.cpp permutes Q/K rows of llama-style models for adjacent-pair
  // rotation; qwen2 keeps the HF layout and rotates split halves.
  c.rope_neox = family->gguf_rope_neox;
  c.qkv_bias = g.FindTensor("blk.0.attn_q.bias") != nullptr;
  c.tied_embeddings = g.FindTensor("output.weight") == nullptr;
  FamilyTraits(*family, &c);
  if (family->gguf_swa_period > 0) {
    BRAID_ASSIGN_OR_RETURN(int64_t window,
                           GgufInt(g, p + "attention.sliding_window", 0, 0, kMaxContext));
    if (window > 0) {
      c.sliding_window = static_cast<int>(window);
      c.rope_local_base = family->gguf_rope_local_base;
      c.sliding.resize(c.n_layer);
      for (int i = 0; i < c.n_layer; ++i) c.sliding[i] = (i + 1) % family->gguf_swa_period != 0;
    }
  }
  return c;
}

class GgufModelFile final : public ModelFile {
 public:
  GgufModelFile(std::unique_ptr<GgufFile> gguf, const ModelConfig& config,
                std::map<std::string, TensorInfo, std::less<>> tensors)
      : gguf_(std::move(gguf)) {
    config_ = config;
    tensors_ = std::move(tensors);
    path_ = gguf_->path();
  }
  const GgufFile* gguf() const override { return gguf_.get(); }

 private:
  std::unique_ptr<GgufFile> gguf_;
};

Result<std::unique_ptr<ModelFile>> LoadGguf(const std::string& path) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::Open(path));
  BRAID_ASSIGN_OR_RETURN(ModelConfig config, ConfigFromGguf(*g));
  std::map<std::string, TensorInfo, std::less<>> tensors;
  for (const TensorInfo& t : g->tensors()) tensors.emplace(t.name, t);
  BRAID_RETURN_IF_ERROR(ValidateTensors(config, tensors, path));
  return std::unique_ptr<ModelFile>(new GgufModelFile(std::move(g), config, std::move(tensors)));
}

// ---- Hugging Face --------------------------------------------------------------

// Reads config.json field `key`: an integer in [lo, hi]; `fallback` when absent
// or null (nullopt: required).
Result<int64_t> JsonInt(const Json& j, const std::string& path, const char* key,
                        std::optional<int64_t> fallback, int64_t lo, int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return Status::Corruption(path + ": missing '" + key + "'");
  }
  if (!it->is_number_integer())
    return Status::Corruption(path + ": '" + key + "' is not an integer");
  const bool too_big = it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi);
  const int64_t v = too_big ? hi : it->get<int64_t>();
  if (too_big || v < lo || v > hi) {
    return Status::Corruption(path + ": '" + key + "' is " + it->dump() + ", outside [" +
                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

Result<double> JsonPositive(const Json& j, const std::string& path, const char* key,
                            double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Status::Corruption(path + ": '" + key + "' is not a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v <= 0) {
    return Status::Corruption(path + ": '" + key + "' is " + it->dump() +
                              ", expected a positive number");
  }
  return v;
}

Status HfRopeScaling(const Json& rs, const std::string& path, ModelConfig* c);

// RoPE's base and scaling: "rope_theta" and "rope_scaling" as published
// checkpoints write them, or "rope_parameters" as transformers 5 saves them
// (one object, or for Gemma 3 one per layer type: "full_attention" and
// "sliding_attention", the latter giving the local base).
Status HfRope(const Json& j, const std::string& path, ModelConfig* c) {
  auto rp = j.find("rope_parameters");
  if (rp == j.end() || rp->is_null()) {
    BRAID_ASSIGN_OR_RETURN(double base, JsonPositive(j, path, "rope_theta", 10000.0));
    c->rope_base = static_cast<float>(base);
    auto it = j.find("rope_scaling");
    if (it == j.end() || it->is_null()) return Status::Ok();
    return HfRopeScaling(*it, path, c);
  }
  if (!rp->is_object()) return Status::Corruption(path + ": 'rope_parameters' is not an object");
  const Json* global = &*rp;
  if (rp->contains("full_attention")) {
    global = &(*rp)["full_attention"];
    auto local = rp->find("sliding_attention");
    if (local != rp->end()) {
      if (!local->is_object())
        return Status::Corruption(path + ": 'rope_parameters.sliding_attention' is not an object");
      auto type = local->find("rope_type");
      if (type != local->end() && !(type->is_string() && type->get<std::string>() == "default"))
        return Status::Unsupported(path + ": sliding layers' rope_type " + type->dump() +
                                   " is not supported");
      BRAID_ASSIGN_OR_RETURN(double local_base, JsonPositive(*local, path, "rope_theta", 10000.0));
      c->rope_local_base = static_cast<float>(local_base);
    }
  }
  if (!global->is_object()) return Status::Corruption(path + ": 'rope_parameters' is malformed");
  BRAID_ASSIGN_OR_RETURN(double base, JsonPositive(*global, path, "rope_theta", 10000.0));
  c->rope_base = static_cast<float>(base);
  return HfRopeScaling(*global, path, c);
}

Status HfRopeScaling(const Json& rs, const std::string& path, ModelConfig* c) {
  if (!rs.is_object()) return Status::Corruption(path + ": 'rope_scaling' is not an object");
  std::string type;
  for (const char* k : {"rope_type", "type"}) {
    auto t = rs.find(k);
    if (t != rs.end() && t->is_string()) {
      type = t->get<std::string>();
      break;
    }
  }
  if (type.empty() || type == "default") return Status::Ok();
  if (type != "llama3") {
    return Status::Unsupported(path + ": rope_scaling type '" + type + "' is not supported");
  }
  BRAID_ASSIGN_OR_RETURN(double factor, JsonPositive(rs, path, "factor", 0.0));
  if (factor == 0.0) return Status::Corruption(path + ": llama3 rope_scaling has no 'factor'");
  BRAID_ASSIGN_OR_RETURN(double low, JsonPositive(rs, path, "low_freq_factor", 1.0));
  BRAID_ASSIGN_OR_RETURN(double high, JsonPositive(rs, path, "high_freq_factor", 4.0));
  BRAID_ASSIGN_OR_RETURN(
      int64_t orig, JsonInt(rs, path, "original_max_position_embeddings", 8192, 1, kMaxContext));
  c->rope_scaling.factor = static_cast<float>(factor);
  c->rope_scaling.low_freq_factor = static_cast<float>(low);
  c->rope_scaling.high_freq_factor = static_cast<float>(high);
  c->rope_scaling.original_context = static_cast<int>(orig);
  return Status::Ok();
}

// Gemma 3's layer pattern: "layer_types" (one "sliding_attention" or
// "full_attention" per layer), else every "sliding_window_pattern"-th layer
// global, else the family's period; and the local RoPE base.
Status HfSlidingWindow(const Json& j, const std::string& path, const Family& family,
                       ModelConfig* c) {
  BRAID_ASSIGN_OR_RETURN(int64_t window, JsonInt(j, path, "sliding_window", 0, 0, kMaxContext));
  BRAID_ASSIGN_OR_RETURN(double local_base, JsonPositive(j, path, "rope_local_base_freq",
                                                         family.gguf_rope_local_base));
  if (window == 0) return Status::Ok();
  c->sliding_window = static_cast<int>(window);
  if (c->rope_local_base == 0.0f) c->rope_local_base = static_cast<float>(local_base);
  c->sliding.assign(c->n_layer, false);
  auto types = j.find("layer_types");
  if (types != j.end() && !types->is_null()) {
    if (!types->is_array() || types->size() != static_cast<size_t>(c->n_layer))
      return Status::Corruption(path + ": 'layer_types' is not a list of " +
                                std::to_string(c->n_layer) + " layer types");
    for (int i = 0; i < c->n_layer; ++i) {
      const Json& t = (*types)[i];
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name != "sliding_attention" && name != "full_attention")
        return Status::Unsupported(path + ": layer_types[" + std::to_string(i) + "] is '" + name +
                                   "' (sliding_attention or full_attention)");
      c->sliding[i] = name == "sliding_attention";
    }
    return Status::Ok();
  }
  BRAID_ASSIGN_OR_RETURN(int64_t period, JsonInt(j, path, "sliding_window_pattern",
                                                 family.gguf_swa_period, 1, kMaxLayers));
  for (int i = 0; i < c->n_layer; ++i) c->sliding[i] = (i + 1) % period != 0;
  return Status::Ok();
}

Result<ModelConfig> ConfigFromHf(const Json& j, const std::string& path) {
  ModelConfig c;
  if (!j.is_object()) return Status::Corruption(path + ": config is not a JSON object");
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) {
    return Status::Corruption(path + ": missing string 'model_type'");
  }
  const Family* family = FindFamilyByHfModelType(mt->get<std::string>());
  if (family == nullptr) return UnsupportedFamily(path, "model_type", mt->get<std::string>());
  c.arch = family->arch;
  const char* act_name =
      GateActivation(family->block) == Activation::kSilu ? "silu" : "gelu_pytorch_tanh";
  auto act = j.find(family->hf_activation_key);
  if (act != j.end() && !(act->is_string() && act->get<std::string>() == act_name)) {
    return Status::Unsupported(path + ": " + family->hf_activation_key + " " + act->dump() +
                               " is not supported (" + act_name + ")");
  }
  for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    auto it = j.find(cap);
    if (it != j.end() && !it->is_null())
      return Status::Unsupported(path + ": '" + cap + "' is not supported");
  }
  auto swa = j.find("use_sliding_window");
  if (family->gguf_swa_period == 0 && swa != j.end() && swa->is_boolean() && swa->get<bool>())
    return Status::Unsupported(path + ": use_sliding_window is not supported for " +
                               mt->get<std::string>());
  BRAID_ASSIGN_OR_RETURN(int64_t n_embd,
                         JsonInt(j, path, "hidden_size", std::nullopt, 1, kMaxEmbd));
  BRAID_ASSIGN_OR_RETURN(int64_t n_ff,
                         JsonInt(j, path, "intermediate_size", std::nullopt, 1, kMaxFf));
  BRAID_ASSIGN_OR_RETURN(int64_t n_layer,
                         JsonInt(j, path, "num_hidden_layers", std::nullopt, 1, kMaxLayers));
  BRAID_ASSIGN_OR_RETURN(int64_t n_head,
                         JsonInt(j, path, "num_attention_heads", std::nullopt, 1, kMaxHeads));
  BRAID_ASSIGN_OR_RETURN(int64_t n_head_kv,
                         JsonInt(j, path, "num_key_value_heads", n_head, 1, kMaxHeads));
  const bool has_head_dim = j.contains("head_dim") && !j["head_dim"].is_null();
  if (!has_head_dim && n_embd % n_head != 0) {
    return Status::Corruption(path + ": hidden_size " + std::to_string(n_embd) +
                              " is not a multiple of num_attention_heads " +
                              std::to_string(n_head));
  }
  BRAID_ASSIGN_OR_RETURN(int64_t head_dim,
                         JsonInt(j, path, "head_dim", n_embd / n_head, 1, kMaxHeadDim));
  BRAID_ASSIGN_OR_RETURN(int64_t n_vocab,
                         JsonInt(j, path, "vocab_size", std::nullopt, 1, kMaxVocab));
  BRAID_ASSIGN_OR_RETURN(int64_t n_ctx,
                         JsonInt(j, path, "max_position_embeddings", 2048, 1, kMaxContext));
  BRAID_ASSIGN_OR_RETURN(double eps, JsonPositive(j, path, "rms_norm_eps", 1e-6));
  bool tie = false;
  auto tw = j.find("tie_word_embeddings");
  if (tw != j.end() && !tw->is_null()) {
    if (!tw->is_boolean())
      return Status::Corruption(path + ": 'tie_word_embeddings' is not a bool");
    tie = tw->get<bool>();
  }
  c.n_vocab = static_cast<int>(n_vocab);
  c.n_embd = static_cast<int>(n_embd);
  c.n_layer = static_cast<int>(n_layer);
  c.n_head = static_cast<int>(n_head);
  c.n_head_kv = static_cast<int>(n_head_kv);
  c.head_dim = static_cast<int>(head_dim);
  c.n_rot = c.head_dim;
  c.n_ff = static_cast<int>(n_ff);
  c.n_ctx = static_cast<int>(n_ctx);
  c.rms_eps = static_cast<float>(eps);
  BRAID_RETURN_IF_ERROR(HfRope(j, path, &c));
  c.rope_neox = true;  // HF checkpoints rotate split halves
  c.qkv_bias = family->qkv_bias;
  auto bias = j.find("attention_bias");
  if (bias != j.end() && bias->is_boolean()) c.qkv_bias = bias->get<bool>();
  c.tied_embeddings = tie;
  FamilyTraits(*family, &c);
  c.norm_offset = family->hf_norm_offset;
  // Gemma: scores scaled by query_pre_attn_scalar^-1/2 rather than head_dim's.
  BRAID_ASSIGN_OR_RETURN(double q_scalar,
                         JsonPositive(j, path, "query_pre_attn_scalar", c.head_dim));
  if (q_scalar != c.head_dim) c.attn_scale = static_cast<float>(1.0 / std::sqrt(q_scalar));
  if (family->gguf_swa_period > 0) BRAID_RETURN_IF_ERROR(HfSlidingWindow(j, path, *family, &c));
  if (family->hf_window_all_layers) {
    BRAID_ASSIGN_OR_RETURN(int64_t window, JsonInt(j, path, "sliding_window", 0, 0, kMaxContext));
    if (window > 0 && window < c.n_ctx) {
      c.sliding_window = static_cast<int>(window);
      c.sliding.assign(c.n_layer, true);
      c.rope_local_base = c.rope_base;
    }
  }
  return c;
}

// Hugging Face tensor name -> GGUF name (the family's tables); nullopt for
// names we do not use.
std::optional<std::string> HfToGgufName(const Family& family, std::string_view hf) {
  for (const TensorSpec& t : family.globals)
    if (t.hf != nullptr && hf == t.hf) return std::string(t.gguf);
  constexpr std::string_view kLayers = "model.layers.";
  if (hf.substr(0, kLayers.size()) != kLayers) return std::nullopt;
  hf.remove_prefix(kLayers.size());
  size_t digits = 0;
  while (digits < hf.size() && digits < 7 && hf[digits] >= '0' && hf[digits] <= '9') ++digits;
  if (digits == 0 || digits >= hf.size() || hf[digits] != '.') return std::nullopt;
  const std::string layer(hf.substr(0, digits));
  if (layer.size() > 1 && layer[0] == '0') return std::nullopt;
  const std::string_view rest = hf.substr(digits + 1);
  for (const TensorSpec& t : family.layer)
    if (t.hf != nullptr && rest == t.hf) return "blk." + layer + "." + std::string(t.gguf);
  return std::nullopt;
}

// The block size of fine-grained FP8 scales: quantization_config's
// weight_block_size, or 128 x 128 (transformers' default) without one.
Status Fp8BlockSize(const Json& config, const std::string& config_path, int64_t* rows,
                    int64_t* cols) {
  *rows = *cols = 128;
  auto qc = config.find("quantization_config");
  if (qc == config.end() || !qc->is_object()) return Status::Ok();
  auto b = qc->find("weight_block_size");
  if (b == qc->end()) return Status::Ok();
  auto size = [](const Json& v) {
    return v.is_number_unsigned() && v.get<uint64_t>() > 0 && v.get<uint64_t>() <= (1u << 20);
  };
  if (!b->is_array() || b->size() != 2 || !size((*b)[0]) || !size((*b)[1]))
    return Status::Corruption(config_path +
                              ": quantization_config.weight_block_size is not two positive sizes");
  *rows = (*b)[0].get<int64_t>();
  *cols = (*b)[1].get<int64_t>();
  return Status::Ok();
}

// What FP8 matrices are dequantized into: the checkpoint's own dtype
// (config.json's dtype, or torch_dtype before transformers 5), as
// transformers loads them with dtype "auto": bf16 for a bf16 checkpoint,
// f16 for f16, fp32 otherwise.
kernels::DType Fp8LoadType(const Json& config) {
  for (const char* key : {"dtype", "torch_dtype"}) {
    auto it = config.find(key);
    if (it == config.end() || !it->is_string()) continue;
    const std::string d = it->get<std::string>();
    if (d == "bfloat16") return kernels::DType::kBF16;
    if (d == "float16") return kernels::DType::kF16;
    return kernels::DType::kF32;
  }
  return kernels::DType::kF32;
}

// values in `type` (F32, F16 or BF16) as bytes.
std::vector<uint8_t> StoreAs(kernels::DType type, const std::vector<float>& values) {
  using kernels::DType;
  const size_t width = type == DType::kF32 ? 4 : 2;
  std::vector<uint8_t> out(values.size() * width);
  if (type == DType::kF32) {
    std::memcpy(out.data(), values.data(), out.size());
  } else {
    auto* h = reinterpret_cast<uint16_t*>(out.data());
    for (size_t i = 0; i < values.size(); ++i)
      h[i] = type == DType::kBF16 ? kernels::Fp32ToBf16(values[i]) : kernels::Fp32ToFp16(values[i]);
  }
  return out;
}

class SafetensorsModelFile final : public ModelFile {
 public:
  SafetensorsModelFile(std::unique_ptr<SafetensorsCheckpoint> ck, const ModelConfig& config,
                       std::map<std::string, TensorInfo, std::less<>> tensors, std::string path,
                       std::string tokenizer_json, std::vector<std::vector<uint8_t>> dequantized)
      : checkpoint_(std::move(ck)),
        tokenizer_json_(std::move(tokenizer_json)),
        dequantized_(std::move(dequantized)) {
    config_ = config;
    tensors_ = std::move(tensors);
    path_ = std::move(path);
  }
  std::string tokenizer_json_path() const override { return tokenizer_json_; }

 private:
  std::unique_ptr<SafetensorsCheckpoint> checkpoint_;
  std::string tokenizer_json_;
  std::vector<std::vector<uint8_t>> dequantized_;  // FP8 matrices, in Fp8LoadType's type
};

Result<Json> ReadConfigJson(const std::string& path) {
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  if (file->size() > kMaxConfigJsonBytes) {
    return Status::Corruption(path + ": larger than 16 MiB, not a config.json");
  }
  const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
  BRAID_RETURN_IF_ERROR(CheckJsonText(path, text));
  try {
    Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Status::Corruption(path + ": invalid JSON");
    return j;
  } catch (const std::exception& e) {  // bad_alloc: nothing else can be thrown here
    return Status::Corruption(path + ": cannot parse: " + e.what());
  }
}

// `dir` holds config.json; `weights` is the .safetensors file or index to read.
Result<std::unique_ptr<ModelFile>> LoadHf(const std::string& path, const fs::path& dir,
                                          const fs::path& weights) {
  const std::string config_path = (dir / "config.json").string();
  BRAID_ASSIGN_OR_RETURN(Json j, ReadConfigJson(config_path));
  Result<ModelConfig> read = Status::Internal(config_path + ": not read");
  try {
    read = ConfigFromHf(j, config_path);
  } catch (const std::exception& e) {
    return Status::Corruption(config_path + ": " + e.what());
  }
  BRAID_ASSIGN_OR_RETURN(ModelConfig config, std::move(read));
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCheckpoint> ck,
                         SafetensorsCheckpoint::Open(weights.string()));
  std::map<std::string, TensorInfo, std::less<>> tensors;
  std::vector<std::vector<uint8_t>> dequantized;
  int64_t block_rows = 0, block_cols = 0;  // FP8 block scales: read at the first FP8 tensor
  const kernels::DType fp8_to = Fp8LoadType(j);
  auto find_stored = [&](const std::string& name) -> const TensorInfo* {
    auto it = ck->tensors().find(name);
    return it == ck->tensors().end() ? nullptr : &it->second;
  };
  const Family& family = *FindFamily(config.arch);
  for (const auto& [hf_name, info] : ck->tensors()) {
    std::optional<std::string> name = HfToGgufName(family, hf_name);
    if (!name) continue;  // rotary caches and other tensors the runner does not read
    TensorInfo t = info;
    t.name = *name;
    if (t.type == kernels::DType::kF8_E4M3) {
      if (block_rows == 0)
        BRAID_RETURN_IF_ERROR(Fp8BlockSize(j, config_path, &block_rows, &block_cols));
      std::vector<float> values;
      BRAID_RETURN_IF_ERROR(DequantizeFp8(info, hf_name, block_rows, block_cols, find_stored,
                                          config_path + ": tensor '" + hf_name + "' is F8_E4M3",
                                          &values));
      std::vector<uint8_t> stored = StoreAs(fp8_to, values);
      t.type = fp8_to;
      t.data = stored.data();
      t.nbytes = stored.size();
      dequantized.push_back(std::move(stored));  // the buffer moves, its data stays
    }
    tensors.emplace(*name, std::move(t));
  }
  if (tensors.count("blk.0.attn_q.bias") != 0) config.qkv_bias = true;
  // An lm_head stored next to tie_word_embeddings is used as is.
  config.tied_embeddings = tensors.count("output.weight") == 0 && config.tied_embeddings;
  // Errors name the checkpoint's tensors and the shard holding each.
  HfTensorSources sources;
  sources.weights = weights.string();
  for (const auto& shard : ck->shards())
    for (const TensorInfo& t : shard->tensors())
      if (std::optional<std::string> name = HfToGgufName(family, t.name))
        sources.by_gguf_name[*name] = {t.name, shard->path()};
  BRAID_RETURN_IF_ERROR(ValidateTensors(config, tensors, path, &sources));
  return std::unique_ptr<ModelFile>(
      new SafetensorsModelFile(std::move(ck), config, std::move(tensors), path,
                               (dir / "tokenizer.json").string(), std::move(dequantized)));
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// ---- validation ----------------------------------------------------------------

Status CheckConfig(const ModelConfig& c, const std::string& path) {
  auto bad = [&](const std::string& what) { return Status::Corruption(path + ": " + what); };
  auto in_range = [&](const char* name, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) {
      return bad(std::string(name) + " is " + std::to_string(v) + ", outside [" +
                 std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return Status::Ok();
  };
  BRAID_RETURN_IF_ERROR(in_range("n_vocab", c.n_vocab, 1, kMaxVocab));
  BRAID_RETURN_IF_ERROR(in_range("n_embd", c.n_embd, 1, kMaxEmbd));
  BRAID_RETURN_IF_ERROR(in_range("n_layer", c.n_layer, 1, kMaxLayers));
  BRAID_RETURN_IF_ERROR(in_range("n_head", c.n_head, 1, kMaxHeads));
  BRAID_RETURN_IF_ERROR(in_range("n_head_kv", c.n_head_kv, 1, kMaxHeads));
  BRAID_RETURN_IF_ERROR(in_range("head_dim", c.head_dim, 2, kMaxHeadDim));
  BRAID_RETURN_IF_ERROR(in_range("n_ff", c.n_ff, 1, kMaxFf));
  BRAID_RETURN_IF_ERROR(in_range("n_ctx", c.n_ctx, 1, kMaxContext));
  BRAID_RETURN_IF_ERROR(in_range("n_rot", c.n_rot, 2, c.head_dim));
  if (c.n_head % c.n_head_kv != 0) {
    return bad("n_head (" + std::to_string(c.n_head) + ") is not a multiple of n_head_kv (" +
               std::to_string(c.n_head_kv) + ")");
  }
  if (c.head_dim % 2 != 0) return bad("head_dim " + std::to_string(c.head_dim) + " is odd");
  if (c.n_rot % 2 != 0) return bad("n_rot " + std::to_string(c.n_rot) + " is odd");
  if (!(c.rms_eps > 0) || !std::isfinite(c.rms_eps)) return bad("rms_eps is not positive");
  if (!(c.rope_base > 0) || !std::isfinite(c.rope_base)) return bad("rope_base is not positive");
  if (c.rope_scaling.factor != 0.0f &&
      (!(c.rope_scaling.factor > 0) || !std::isfinite(c.rope_scaling.factor) ||
       !(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor) ||
       c.rope_scaling.original_context <= 0)) {
    return bad(
        "rope scaling needs factor > 0, high_freq_factor > low_freq_factor and a "
        "positive original context");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTensors(const ModelConfig& c,
                       const std::map<std::string, TensorInfo, std::less<>>& tensors,
                       const std::string& path, const HfTensorSources* hf) {
  BRAID_RETURN_IF_ERROR(CheckConfig(c, path));
  // A checkpoint's tensors by their stored names (model.layers.N. + the
  // family's suffix), shapes reversed to PyTorch's order.
  auto hf_name = [](const TensorSpec& t, int layer) -> std::string {
    if (t.hf == nullptr) return TensorName(t, layer);
    return layer < 0 ? t.hf : "model.layers." + std::to_string(layer) + "." + t.hf;
  };
  auto hf_shape = [](std::vector<int64_t> shape) {
    std::reverse(shape.begin(), shape.end());
    return ShapeString(shape);
  };
  auto expect = [&](const TensorSpec& t, int layer) -> Status {
    const std::string name = TensorName(t, layer);
    const std::vector<int64_t> shape = TensorShape(t, c);
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      if (!TensorRequired(t, c)) return Status::Ok();
      if (hf == nullptr) return Status::NotFound(path + ": missing tensor '" + name + "'");
      return Status::NotFound(hf->weights + ": missing tensor '" + hf_name(t, layer) + "'" +
                              (t.presence == Presence::kUnlessTied
                                   ? " (config.json does not set tie_word_embeddings)"
                                   : ""));
    }
    if (it->second.shape == shape) return Status::Ok();
    if (hf == nullptr) {
      return Status::Corruption(path + ": tensor '" + name + "' has shape " +
                                ShapeString(it->second.shape) + ", expected " + ShapeString(shape));
    }
    auto src = hf->by_gguf_name.find(name);
    const bool known = src != hf->by_gguf_name.end();
    return Status::Corruption((known ? src->second.file : hf->weights) + ": tensor '" +
                              (known ? src->second.name : hf_name(t, layer)) + "' has shape " +
                              hf_shape(it->second.shape) + ", expected " + hf_shape(shape));
  };
  const Family* family = FindFamily(c.arch);
  if (family == nullptr) return Status::Unsupported(path + ": unknown architecture");
  for (const TensorSpec& t : family->globals) BRAID_RETURN_IF_ERROR(expect(t, -1));
  for (int l = 0; l < c.n_layer; ++l)
    for (const TensorSpec& t : family->layer) BRAID_RETURN_IF_ERROR(expect(t, l));
  return Status::Ok();
}

Status ModelFile::KeepLayers(int n) {
  if (n < 1 || n > config_.n_layer)
    return Status::InvalidArgument(path_ + ": cannot keep " + std::to_string(n) + " layers of " +
                                   std::to_string(config_.n_layer));
  config_.n_layer = n;
  return Status::Ok();
}

const TensorInfo* ModelFile::Find(std::string_view gguf_name) const {
  auto it = tensors_.find(gguf_name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<std::unique_ptr<ModelFile>> LoadModelFile(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "model.safetensors.index.json", ec)) {
      return LoadHf(path, p, p / "model.safetensors.index.json");
    }
    if (fs::exists(p / "model.safetensors", ec)) return LoadHf(path, p, p / "model.safetensors");
    return Status::NotFound(path +
                            ": directory has neither model.safetensors nor "
                            "model.safetensors.index.json");
  }
  if (p.filename() == "config.json") {
    const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    if (fs::exists(dir / "model.safetensors.index.json", ec)) {
      return LoadHf(path, dir, dir / "model.safetensors.index.json");
    }
    return LoadHf(path, dir, dir / "model.safetensors");
  }
  if (EndsWith(path, ".safetensors") || EndsWith(path, ".safetensors.index.json")) {
    const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    return LoadHf(path, dir, p);
  }
  return LoadGguf(path);
}

Status DequantizeFp8(const TensorInfo& t, const std::string& name, int64_t block_rows,
                     int64_t block_cols,
                     const std::function<const TensorInfo*(const std::string&)>& find,
                     const std::string& where, std::vector<float>* out) {
  if (t.shape.size() != 2) return Status::Unsupported(where + " but not a matrix");
  if (block_rows <= 0 || block_cols <= 0)
    return Status::InvalidArgument(where + ": FP8 blocks need positive sizes");
  const int64_t k = t.shape[0], n = t.shape[1];
  auto floats = [&](const TensorInfo& s) -> Result<std::vector<float>> {
    using kernels::DType;
    if (s.type != DType::kF32 && s.type != DType::kBF16 && s.type != DType::kF16)
      return Status::Unsupported(where + ", and its scales '" + s.name +
                                 "' are not F32, BF16 or F16");
    std::vector<float> v(static_cast<size_t>(s.elements()));
    kernels::DequantizeRow(s.type, s.data, v.data(), s.elements());
    return v;
  };
  const auto* q = static_cast<const uint8_t*>(t.data);
  if (const TensorInfo* s = find(name + "_scale_inv")) {
    const int64_t br = block_rows, bc = block_cols;
    const int64_t nb = (n + br - 1) / br, kb = (k + bc - 1) / bc;
    if (s->shape.size() != 2 || s->shape[0] != kb || s->shape[1] != nb)
      return Status::Corruption(where + " [" + std::to_string(n) + ", " + std::to_string(k) +
                                "] in blocks of " + std::to_string(br) + " x " +
                                std::to_string(bc) + ", so '" + s->name + "' should be [" +
                                std::to_string(nb) + ", " + std::to_string(kb) + "]");
    BRAID_ASSIGN_OR_RETURN(std::vector<float> sv, floats(*s));
    out->assign(static_cast<size_t>(n) * k, 0.0f);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c)
        (*out)[r * k + c] = kernels::Fp8E4M3ToFp32(q[r * k + c]) * sv[(r / br) * kb + c / bc];
    return Status::Ok();
  }
  if (const TensorInfo* s = find(name + "_scale")) {
    const int64_t count = s->elements();
    if (count != 1 && count != n)
      return Status::Corruption(where + " with " + std::to_string(n) + " rows, but '" + s->name +
                                "' holds " + std::to_string(count) +
                                " scales (1 for the matrix, or 1 per row)");
    BRAID_ASSIGN_OR_RETURN(std::vector<float> sv, floats(*s));
    out->assign(static_cast<size_t>(n) * k, 0.0f);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c)
        (*out)[r * k + c] = kernels::Fp8E4M3ToFp32(q[r * k + c]) * sv[count == 1 ? 0 : r];
    return Status::Ok();
  }
  return Status::Corruption(where + " with no '" + name + "_scale_inv' or '" + name +
                            "_scale' beside it");
}

}  // namespace braid
