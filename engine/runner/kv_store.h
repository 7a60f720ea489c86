// Paged key/value storage: a fixed number of blocks of `block_size` token
// slots, per layer, in fp32 or fp16 (kernels::KvType):
//   k[layer][block][slot][n_head_kv * head_dim], v the same.
// Which blocks a sequence uses is its block table (kv::BlockPool and the
// radix cache decide that); this class only holds the numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "kernels/dtype.h"

namespace braid {

class KvStore {
 public:
  KvStore(int n_layer, int n_blocks, int block_size, int kv_dim,
          kernels::KvType type = kernels::KvType::kF32)
      : n_layer_(n_layer), n_blocks_(n_blocks), block_size_(block_size), kv_dim_(kv_dim),
        type_(type), elem_(type == kernels::KvType::kF16 ? 2 : 4),
        k_(static_cast<size_t>(n_layer) * n_blocks * block_size * kv_dim * elem_),
        v_(k_.size()) {}

  int n_layer() const { return n_layer_; }
  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  int kv_dim() const { return kv_dim_; }
  kernels::KvType type() const { return type_; }
  size_t bytes() const { return 2 * k_.size(); }

  // Stores n values of K (or V) at `offset` within the row of (layer, block, slot).
  void Put(bool value, int layer, int block, int slot, int offset, const float* x, int n) {
    uint8_t* dst = (value ? v_ : k_).data() + (Offset(layer, block, slot) + offset) * elem_;
    if (type_ == kernels::KvType::kF32) {
      std::memcpy(dst, x, n * sizeof(float));
    } else {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int i = 0; i < n; ++i) h[i] = kernels::Fp32ToFp16(x[i]);
    }
  }

  // One layer's cache as the attention kernel reads it (block_table left unset).
  kernels::PagedKv Layer(int layer) const {
    kernels::PagedKv p;
    p.k = k_.data() + Offset(layer, 0, 0) * elem_;
    p.v = v_.data() + Offset(layer, 0, 0) * elem_;
    p.block_size = block_size_;
    p.row_stride = kv_dim_;
    p.type = type_;
    return p;
  }

 private:
  size_t Offset(int layer, int block, int slot) const {
    return ((static_cast<size_t>(layer) * n_blocks_ + block) * block_size_ + slot) * kv_dim_;
  }
  int n_layer_, n_blocks_, block_size_, kv_dim_;
  kernels::KvType type_;
  size_t elem_;
  std::vector<uint8_t> k_, v_;
};

}  // namespace braid
