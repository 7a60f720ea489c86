// A named, typed view of weights inside a memory-mapped model file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace braid {

struct TensorInfo {
  std::string name;
  kernels::DType type = kernels::DType::kF32;
  // GGUF order: shape[0] is the innermost (contiguous) dimension, the reverse
  // of PyTorch's. A weight matrix [out, in] in PyTorch is {in, out} here.
  std::vector<int64_t> shape;
  const void* data = nullptr;  // points into the mapping; valid while the file is open
  size_t nbytes = 0;

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

}  // namespace braid
