// A read-only memory mapping of a whole file (or a borrowed buffer for tests
// and fuzzing). Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/status.h"

namespace braid {

class MappedFile {
 public:
  // Maps `path` read-only. Errors name the path and the errno text.
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  // Wraps memory the caller keeps alive for the lifetime of the object.
  static std::unique_ptr<MappedFile> Borrow(std::string name, const uint8_t* data, size_t size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  MappedFile() = default;
  std::string name_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;  // true when data_ came from mmap
};

}  // namespace braid
