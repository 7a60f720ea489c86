// Test-only writers that build GGUF files, safetensors files and tiny
// Llama-family checkpoints in memory (little-endian), so reader tests can make
// valid files and then break exactly one thing. Not part of the library.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/dtype.h"

namespace braid::test {

// ---- raw little-endian bytes -----------------------------------------------------

inline void PutU8(std::string* b, uint8_t v) { b->push_back(static_cast<char>(v)); }
inline void PutU32(std::string* b, uint32_t v) { b->append(reinterpret_cast<const char*>(&v), 4); }
inline void PutU64(std::string* b, uint64_t v) { b->append(reinterpret_cast<const char*>(&v), 8); }
inline void PutStr(std::string* b, const std::string& s) {
  PutU64(b, s.size());
  b->append(s);
}
template <typename T>
void PutPod(std::string* b, T v) {
  b->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// GGUF value type ids (the spec's numbering).
enum : uint32_t {
  kTU8 = 0,
  kTI8 = 1,
  kTU16 = 2,
  kTI16 = 3,
  kTU32 = 4,
  kTI32 = 5,
  kTF32 = 6,
  kTBool = 7,
  kTString = 8,
  kTArray = 9,
  kTU64 = 10,
  kTI64 = 11,
  kTF64 = 12,
};

// ---- GGUF -------------------------------------------------------------------------

class GgufBuilder {
 public:
  struct Tensor {
    std::string name;
    uint32_t type = 0;
    std::vector<uint64_t> ne;
    std::optional<uint64_t> offset;  // default: packed after the previous tensor, aligned
    size_t nbytes = 0;               // bytes written when Braid does not know the type

    // Bytes of data: from type and shape (at Build time) when the type is known.
    size_t Size() const {
      const kernels::DTypeInfo* info = kernels::GetDTypeInfo(type);
      if (info == nullptr) return nbytes;
      uint64_t n = 1;
      for (uint64_t d : ne) n *= d;  // wraps for absurd shapes; those are not written
      return static_cast<size_t>(n / info->block_elems * info->block_bytes);
    }
    uint8_t fill = 0;
    bool write = true;  // false: leave its bytes out (for offsets past the end)
  };

  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count;  // overrides for corrupt headers
  std::optional<uint64_t> kv_count;
  size_t alignment = 32;  // layout only: add general.alignment with KvU32 to change the file's

  // A KV with an already-encoded value.
  void KvRaw(const std::string& key, uint32_t type, const std::string& value) {
    PutStr(&kvs_, key);
    PutU32(&kvs_, type);
    kvs_ += value;
    ++n_kv_;
  }
  template <typename T>
  void Kv(const std::string& key, uint32_t type, T v) {
    std::string b;
    PutPod(&b, v);
    KvRaw(key, type, b);
  }
  void KvU32(const std::string& key, uint32_t v) { Kv(key, kTU32, v); }
  void KvF32(const std::string& key, float v) { Kv(key, kTF32, v); }
  void KvString(const std::string& key, const std::string& v) {
    std::string b;
    PutStr(&b, v);
    KvRaw(key, kTString, b);
  }
  void KvStrings(const std::string& key, const std::vector<std::string>& v) {
    std::string b;
    PutU32(&b, kTString);
    PutU64(&b, v.size());
    for (const auto& s : v) PutStr(&b, s);
    KvRaw(key, kTArray, b);
  }
  template <typename T>
  void KvArray(const std::string& key, uint32_t elem_type, const std::vector<T>& v) {
    std::string b;
    PutU32(&b, elem_type);
    PutU64(&b, v.size());
    for (T x : v) PutPod(&b, x);
    KvRaw(key, kTArray, b);
  }

  // Adds a tensor whose byte size follows from its type (when Braid knows it).
  Tensor& AddTensor(const std::string& name, uint32_t type, std::vector<uint64_t> ne,
                    uint8_t fill = 0) {
    Tensor t;
    t.name = name;
    t.type = type;
    t.ne = std::move(ne);
    t.fill = fill;
    tensors_.push_back(std::move(t));
    return tensors_.back();
  }

  std::string Build() const {
    std::string b;
    PutU32(&b, magic);
    PutU32(&b, version);
    PutU64(&b, tensor_count.value_or(tensors_.size()));
    PutU64(&b, kv_count.value_or(n_kv_));
    b += kvs_;
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const Tensor& t : tensors_) {
      const uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      if (t.write) next = (off + t.Size() + alignment - 1) / alignment * alignment;
      PutStr(&b, t.name);
      PutU32(&b, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) PutU64(&b, d);
      PutU32(&b, t.type);
      PutU64(&b, off);
    }
    if (tensors_.empty()) return b;
    b.resize((b.size() + alignment - 1) / alignment * alignment, '\0');
    const size_t data_start = b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (!tensors_[i].write) continue;
      const size_t n = tensors_[i].Size();
      const size_t end = data_start + offsets[i] + n;
      if (b.size() < end) b.resize(end, '\0');
      std::memset(&b[data_start + offsets[i]], tensors_[i].fill, n);
    }
    return b;
  }

  std::vector<Tensor>& tensors() { return tensors_; }

 private:
  std::string kvs_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

// ---- safetensors --------------------------------------------------------------------

class SafetensorsBuilder {
 public:
  struct Tensor {
    std::string name;
    std::string dtype;
    std::vector<uint64_t> shape;  // PyTorch order
    uint64_t begin = 0, end = 0;
    uint8_t fill = 0;
  };
  // Appends a tensor packed after the previous one.
  Tensor& AddTensor(const std::string& name, const std::string& dtype, std::vector<uint64_t> shape,
                    uint8_t fill = 0) {
    uint64_t n = dtype == "F32"                      ? 4
                 : dtype == "F16" || dtype == "BF16" ? 2
                 : dtype == "F8_E4M3"                ? 1
                                                     : 8;
    for (uint64_t d : shape) n *= d;
    Tensor t{name, dtype, std::move(shape), next_, next_ + n, fill};
    next_ += n;
    tensors_.push_back(std::move(t));
    return tensors_.back();
  }
  std::string extra_header_fields;  // e.g. "\"__metadata__\":{\"format\":\"pt\"},"

  std::string Header() const {
    std::string h = "{" + extra_header_fields;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      h += (i ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + t.dtype +
           "\",\"shape\":[";
      for (size_t k = 0; k < t.shape.size(); ++k) h += (k ? "," : "") + std::to_string(t.shape[k]);
      h += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
    }
    h += "}";
    while (h.size() % 8 != 0) h += ' ';  // as the Python writer pads
    return h;
  }
  // The whole file; `header` replaces the generated JSON when given.
  std::string Build(std::optional<std::string> header = std::nullopt) const {
    const std::string h = header.value_or(Header());
    std::string b;
    PutU64(&b, h.size());
    b += h;
    uint64_t data_size = 0;
    for (const Tensor& t : tensors_) data_size = std::max(data_size, t.end);
    const size_t data_start = b.size();
    b.resize(data_start + data_size, '\0');
    for (const Tensor& t : tensors_) {
      if (t.end > t.begin) std::memset(&b[data_start + t.begin], t.fill, t.end - t.begin);
    }
    return b;
  }
  std::vector<Tensor>& tensors() { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  uint64_t next_ = 0;
};

// ---- tiny Llama-family checkpoints ---------------------------------------------------

struct TinyModel {
  std::string arch = "llama";
  int n_vocab = 10, n_embd = 8, n_layer = 2, n_head = 2, n_head_kv = 1, n_ff = 16;
  int n_ctx = 64;
  bool tied = false;
  bool qkv_bias = false;
  int head_dim() const { return n_embd / n_head; }
};

struct TinyTensor {
  std::string gguf_name;
  std::string hf_name;
  std::vector<uint64_t> ne;  // GGUF order
};

inline std::vector<TinyTensor> TinyTensors(const TinyModel& m) {
  const uint64_t e = m.n_embd, q = m.n_head * m.head_dim(), kv = m.n_head_kv * m.head_dim();
  std::vector<TinyTensor> out = {
      {"token_embd.weight", "model.embed_tokens.weight", {e, uint64_t(m.n_vocab)}},
      {"output_norm.weight", "model.norm.weight", {e}},
  };
  if (!m.tied) out.push_back({"output.weight", "lm_head.weight", {e, uint64_t(m.n_vocab)}});
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    const std::string h = "model.layers." + std::to_string(l) + ".";
    out.push_back({g + "attn_norm.weight", h + "input_layernorm.weight", {e}});
    out.push_back({g + "attn_q.weight", h + "self_attn.q_proj.weight", {e, q}});
    out.push_back({g + "attn_k.weight", h + "self_attn.k_proj.weight", {e, kv}});
    out.push_back({g + "attn_v.weight", h + "self_attn.v_proj.weight", {e, kv}});
    out.push_back({g + "attn_output.weight", h + "self_attn.o_proj.weight", {q, e}});
    if (m.qkv_bias) {
      out.push_back({g + "attn_q.bias", h + "self_attn.q_proj.bias", {q}});
      out.push_back({g + "attn_k.bias", h + "self_attn.k_proj.bias", {kv}});
      out.push_back({g + "attn_v.bias", h + "self_attn.v_proj.bias", {kv}});
    }
    out.push_back({g + "ffn_norm.weight", h + "post_attention_layernorm.weight", {e}});
    out.push_back({g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {e, uint64_t(m.n_ff)}});
    out.push_back({g + "ffn_up.weight", h + "mlp.up_proj.weight", {e, uint64_t(m.n_ff)}});
    out.push_back({g + "ffn_down.weight", h + "mlp.down_proj.weight", {uint64_t(m.n_ff), e}});
  }
  return out;
}

// A GgufBuilder holding the tiny model's metadata and F32 tensors; callers may
// add or change things before Build().
inline GgufBuilder TinyGguf(const TinyModel& m) {
  GgufBuilder g;
  const std::string p = m.arch + ".";
  g.KvString("general.architecture", m.arch);
  g.KvU32(p + "context_length", m.n_ctx);
  g.KvU32(p + "embedding_length", m.n_embd);
  g.KvU32(p + "block_count", m.n_layer);
  g.KvU32(p + "feed_forward_length", m.n_ff);
  g.KvU32(p + "attention.head_count", m.n_head);
  g.KvU32(p + "attention.head_count_kv", m.n_head_kv);
  g.KvF32(p + "rope.freq_base", 500000.0f);
  g.KvF32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  std::vector<std::string> tokens;
  for (int i = 0; i < m.n_vocab; ++i) tokens.push_back("t" + std::to_string(i));
  g.KvStrings("tokenizer.ggml.tokens", tokens);
  uint8_t fill = 1;
  for (const TinyTensor& t : TinyTensors(m)) g.AddTensor(t.gguf_name, 0, t.ne, fill++);
  return g;
}

inline std::string TinyHfConfig(const TinyModel& m, const std::string& extra = "") {
  return "{\"model_type\":\"" + m.arch + "\",\"hidden_size\":" + std::to_string(m.n_embd) +
         ",\"intermediate_size\":" + std::to_string(m.n_ff) +
         ",\"num_hidden_layers\":" + std::to_string(m.n_layer) +
         ",\"num_attention_heads\":" + std::to_string(m.n_head) +
         ",\"num_key_value_heads\":" + std::to_string(m.n_head_kv) +
         ",\"max_position_embeddings\":" + std::to_string(m.n_ctx) +
         ",\"vocab_size\":" + std::to_string(m.n_vocab) +
         ",\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"hidden_act\":\"silu\"" +
         ",\"tie_word_embeddings\":" + (m.tied ? "true" : "false") + extra + "}";
}

// A SafetensorsBuilder with the tiny model's tensors under HF names, in BF16.
inline SafetensorsBuilder TinySafetensors(const TinyModel& m) {
  SafetensorsBuilder s;
  uint8_t fill = 1;
  for (const TinyTensor& t : TinyTensors(m)) {
    s.AddTensor(t.hf_name, "BF16", std::vector<uint64_t>(t.ne.rbegin(), t.ne.rend()), fill++);
  }
  return s;
}

// ---- files ----------------------------------------------------------------------------

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "braid_model_test_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& bytes) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

 private:
  std::string path_;
};

}  // namespace braid::test
