// A loaded model file: its configuration and its weights under GGUF tensor
// names (token_embd.weight, blk.N.attn_q.weight, ...), whether it came from a
// GGUF file or from a Hugging Face safetensors checkpoint with config.json.
// LoadModelFile validates that every tensor the architecture needs is present
// with the shape the config implies, and names the first that is not.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"
#include "model/model_config.h"
#include "model/tensor.h"

namespace braid {

class GgufFile;

class ModelFile {
 public:
  virtual ~ModelFile() = default;
  const ModelConfig& config() const { return config_; }
  // nullptr when absent.
  const TensorInfo* Find(std::string_view gguf_name) const;
  // The GGUF file when the model came from one (tokenizer metadata lives there).
  virtual const GgufFile* gguf() const { return nullptr; }
  // The directory holding tokenizer.json for safetensors checkpoints ("" for GGUF).
  virtual std::string tokenizer_json_path() const { return ""; }
  const std::string& path() const { return path_; }
  // Keeps only the first n layers (1 <= n <= n_layer); their tensors are
  // what the forward pass then reads.
  Status KeepLayers(int n);

 protected:
  ModelConfig config_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::string path_;
  friend Result<std::unique_ptr<ModelFile>> LoadModelFile(const std::string& path);
};

// `path` is a .gguf file, a directory with config.json and model.safetensors
// (or model.safetensors.index.json with shards), or a config.json path.
Result<std::unique_ptr<ModelFile>> LoadModelFile(const std::string& path);

// What a Hugging Face checkpoint stores under each GGUF name, so that errors
// name the checkpoint's own tensors and files rather than GGUF names.
struct HfTensorSources {
  std::string weights;  // the file read: model.safetensors or the shard index
  struct Source {
    std::string name;  // as stored: model.embed_tokens.weight
    std::string file;  // the .safetensors file holding it
  };
  std::map<std::string, Source, std::less<>> by_gguf_name;
};

// Checks names and shapes of every tensor the architecture reads; used by
// LoadModelFile and exposed for tests. Errors start with `path` and name
// tensors by GGUF name, shapes innermost first; with `hf`, they start with
// the file that holds (or lacks) the tensor and name it as the checkpoint
// does, shapes in PyTorch order.
Status ValidateTensors(const ModelConfig& config,
                       const std::map<std::string, TensorInfo, std::less<>>& tensors,
                       const std::string& path, const HfTensorSources* hf = nullptr);

// FP8 checkpoints (docs/formats.md): into `out`, the fp32 values of the
// F8_E4M3 matrix `t` (stored as `name`) times the scales `find` gives for
// `name` + "_scale_inv" (one per block of block_rows x block_cols) or else
// `name` + "_scale" (one for the matrix or one per row). Errors start with
// `where`. Used by LoadModelFile and exposed for tests and fuzzing.
Status DequantizeFp8(const TensorInfo& t, const std::string& name, int64_t block_rows,
                     int64_t block_cols,
                     const std::function<const TensorInfo*(const std::string&)>& find,
                     const std::string& where, std::vector<float>* out);

}  // namespace braid
