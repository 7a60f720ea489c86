// GGUF v3 reader. Every count, length, offset, alignment and shape is checked
// against the bytes actually present before it is used; any violation gives a
// Status whose message names the file and the problem, e.g.
//   "m.gguf: tensor 'blk.0.attn_q.weight' data [1024, 4096) extends past end of file (2048 bytes)".
// Facts: docs/formats.md (GGUF section).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/status.h"
#include "model/mapped_file.h"
#include "model/tensor.h"

namespace braid {

// A metadata value. Integers of every width are widened (signed ones to int64,
// unsigned to uint64); arrays keep the element type they were stored with.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType elem_type = GgufType::kU8;  // for arrays
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<uint64_t>,
               std::vector<int64_t>, std::vector<double>, std::vector<bool>,
               std::vector<std::string>>
      value;
};

class GgufFile {
 public:
  // Maps and validates `path`.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Validates a file already in memory (tests, fuzzing). `file` is kept.
  static Result<std::unique_ptr<GgufFile>> Parse(std::unique_ptr<MappedFile> file);

  const std::string& path() const { return file_->name(); }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }

  // ---- metadata -------------------------------------------------------
  const GgufValue* Find(std::string_view key) const;
  // Typed getters: NotFound if absent, InvalidArgument (naming the key and the
  // stored type) if the type does not fit. Integers convert between widths
  // when the value fits; floats accept any numeric type.
  Result<uint64_t> GetUInt(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::string> GetString(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;   // any integer elements
  Result<std::vector<double>> GetFloatArray(std::string_view key) const;  // any numeric elements
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return kv_; }

  // ---- tensors ----------------------------------------------------------
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> kv_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  friend class GgufParser;
};

}  // namespace braid
