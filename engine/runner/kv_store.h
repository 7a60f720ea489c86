// Paged key/value storage: a fixed number of blocks of `block_size` token
// slots, per layer, fp32:
//   k[layer][block][slot][n_head_kv * head_dim], v the same.
// Which blocks a sequence uses is its block table (kv::BlockPool and the
// radix cache decide that); this class only holds the numbers.
#pragma once

#include <cstddef>
#include <vector>

namespace braid {

class KvStore {
 public:
  KvStore(int n_layer, int n_blocks, int block_size, int kv_dim)
      : n_layer_(n_layer), n_blocks_(n_blocks), block_size_(block_size), kv_dim_(kv_dim),
        k_(static_cast<size_t>(n_layer) * n_blocks * block_size * kv_dim),
        v_(k_.size()) {}

  int n_layer() const { return n_layer_; }
  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  int kv_dim() const { return kv_dim_; }
  size_t bytes() const { return 2 * k_.size() * sizeof(float); }

  float* K(int layer, int block, int slot) { return &k_[Offset(layer, block, slot)]; }
  float* V(int layer, int block, int slot) { return &v_[Offset(layer, block, slot)]; }
  const float* K(int layer, int block, int slot) const { return &k_[Offset(layer, block, slot)]; }
  const float* V(int layer, int block, int slot) const { return &v_[Offset(layer, block, slot)]; }

 private:
  size_t Offset(int layer, int block, int slot) const {
    return ((static_cast<size_t>(layer) * n_blocks_ + block) * block_size_ + slot) * kv_dim_;
  }
  int n_layer_, n_blocks_, block_size_, kv_dim_;
  std::vector<float> k_, v_;
};

}  // namespace braid
