// The key/value cache of one sequence, contiguous and fp32:
// k[layer][pos][n_head_kv * head_dim], v the same. (The paged, prefix-shared
// cache of the serving engine replaces this for concurrent requests.)
#pragma once

#include <cstddef>
#include <vector>

namespace braid {

class KvCache {
 public:
  KvCache(int n_layer, int capacity, int kv_dim)
      : n_layer_(n_layer), capacity_(capacity), kv_dim_(kv_dim),
        k_(static_cast<size_t>(n_layer) * capacity * kv_dim),
        v_(static_cast<size_t>(n_layer) * capacity * kv_dim) {}

  int capacity() const { return capacity_; }
  int kv_dim() const { return kv_dim_; }
  float* K(int layer, int pos) { return &k_[Offset(layer, pos)]; }
  float* V(int layer, int pos) { return &v_[Offset(layer, pos)]; }
  const float* K(int layer, int pos) const { return &k_[Offset(layer, pos)]; }
  const float* V(int layer, int pos) const { return &v_[Offset(layer, pos)]; }

 private:
  size_t Offset(int layer, int pos) const {
    return (static_cast<size_t>(layer) * capacity_ + pos) * kv_dim_;
  }
  int n_layer_, capacity_, kv_dim_;
  std::vector<float> k_, v_;
};

}  // namespace braid
