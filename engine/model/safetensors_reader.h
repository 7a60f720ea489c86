// Hugging Face safetensors reader: one file, or a checkpoint split into shards
// by model.safetensors.index.json. The file is an 8-byte little-endian header
// length N, N bytes of JSON, then the tensor data. Every header field is
// validated before use (the checks follow huggingface/safetensors' own:
// header <= 100,000,000 bytes, offsets inside the data and consistent with
// dtype x shape, no overlap, no duplicate names); any violation gives a Status
// whose message starts with the file name, e.g.
//   "model.safetensors: tensor 'lm_head.weight' data_offsets [0, 10) hold 10 bytes, but F32 [3, 4]
//   needs 48".
// Only F32, F16, BF16 and F8_E4M3 tensors are accepted (others: kUnsupported
// naming the tensor and dtype); F8_E4M3 ones are left for the model loader to
// dequantize with the scales stored beside them. Shapes are stored in GGUF order (innermost first),
// the reverse of the JSON. Tensor data is aligned only as the file aligns it: a consumer must not
// assume more than byte alignment. Facts: docs/formats.md. Thread safety: immutable after
// Open/Parse; any thread may read.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"
#include "model/mapped_file.h"
#include "model/tensor.h"

namespace braid {

// The largest header we accept, as huggingface/safetensors does.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

class SafetensorsFile {
 public:
  // Maps and validates `path`.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Validates a file already in memory (tests, fuzzing: pass MappedFile::Borrow).
  // `file` is kept; tensor data points into it.
  static Result<std::unique_ptr<SafetensorsFile>> Parse(std::unique_ptr<MappedFile> file);

  const std::string& path() const { return file_->name(); }
  // Tensors under their stored (Hugging Face) names, in header order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;
  // The string map stored under "__metadata__" (empty when absent).
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> file_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string, std::less<>> metadata_;
  friend class SafetensorsParser;
};

// All tensors of a checkpoint, whatever number of files hold them.
class SafetensorsCheckpoint {
 public:
  // `path` is a .safetensors file or a *.safetensors.index.json whose
  // "weight_map" names shard files in the same directory (plain file names
  // only: no '/' and no "..", so an index cannot reach outside its directory).
  // Every tensor the index lists must be in the shard it names; a tensor found
  // in two shards is an error.
  static Result<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& path);

  // Tensors under their stored (Hugging Face) names; data valid while this lives.
  const std::map<std::string, TensorInfo, std::less<>>& tensors() const { return tensors_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

 private:
  SafetensorsCheckpoint() = default;
  Status Add(std::unique_ptr<SafetensorsFile> shard);
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
};

// Checks that `text` is one well-formed JSON value with no duplicate key in any
// object and nesting no deeper than `max_depth`, without building it (so a
// hostile document costs no memory). Errors are kCorruption "NAME: ...", with
// the byte offset for syntax errors. Used before every nlohmann parse of
// outside JSON (safetensors headers, index.json, config.json).
Status CheckJsonText(const std::string& name, std::string_view text, int max_depth = 64);

}  // namespace braid
