// Paged key/value storage: a fixed number of blocks of `block_size` token
// slots, per layer, in fp32, fp16 or q8 (kernels::KvType; q8 keeps one fp32
// scale per position and KV head, amax / 127, values rounded to nearest even), head-major within a
// block so that one KV head's rows of a block are contiguous:
//   v[layer][block][kv_head][slot][head_dim], k the same, or with
//   `k_transposed` k[layer][block][kv_head][head_dim][slot] (kernels/attention.h);
// q8 tiles [layer][block][kv_head] are packed as kernels/attention.h says
// (block_size and head_dim multiples of 4).
// Which blocks a sequence uses is its block table (kv::BlockPool and the
// radix cache decide that); this class only holds the numbers.
//
// With slides (a hybrid model's sliding layers kept apart, kv::BlockPool),
// the layers `sliding` marks hold n_slides blocks (slides, indexed by a
// sequence's slide table) and the others n_blocks; a block's bytes
// (block_bytes, CopyBlockOut/In) are then those of the other layers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "kernels/dtype.h"
#include "kernels/huge_pages.h"

namespace braid {

class KvStore {
 public:
  KvStore(int n_layer, int n_blocks, int block_size, int n_kv, int head_dim,
          kernels::KvType type = kernels::KvType::kF32, bool k_transposed = false, int n_slides = 0,
          const std::vector<bool>& sliding = {})
      : n_layer_(n_layer),
        n_blocks_(n_blocks),
        n_slides_(n_slides),
        block_size_(block_size),
        n_kv_(n_kv),
        head_dim_(head_dim),
        type_(type),
        k_transposed_(k_transposed),
        elem_(kernels::KvElementBytes(type)),
        full_(FullLayers(n_layer, n_slides, sliding)),
        layer_base_(LayerBases(full_, n_blocks, n_slides)),
        k_(layer_base_.back() * block_size * n_kv * head_dim * elem_),
        v_(k_.size()),
        k_scale_(type == kernels::KvType::kQ8 ? layer_base_.back() * n_kv * block_size : 0),
        v_scale_(k_scale_.size()) {}

  int n_layer() const { return n_layer_; }
  int n_blocks() const { return n_blocks_; }
  int n_slides() const { return n_slides_; }
  // Whether layer `layer` is kept in slides (read through the slide table).
  bool InSlides(int layer) const { return !full_[layer]; }
  int block_size() const { return block_size_; }
  int kv_dim() const { return n_kv_ * head_dim_; }
  kernels::KvType type() const { return type_; }
  size_t bytes() const { return 2 * k_.size() + 2 * k_scale_.size() * sizeof(float); }
  // bytes() per block of such a store.
  static size_t BlockBytes(int n_layer, int block_size, int n_kv, int head_dim,
                           kernels::KvType type) {
    const size_t slots = static_cast<size_t>(n_layer) * block_size * n_kv;
    return 2 * slots * head_dim * kernels::KvElementBytes(type) +
           (type == kernels::KvType::kQ8 ? 2 * slots * sizeof(float) : 0);
  }

  // Stores head_dim values of K (or V) of one KV head at (layer, block, slot).
  void Put(bool value, int layer, int block, int slot, int kv_head, const float* x) {
    const size_t tile =
        Offset(layer, block) + static_cast<size_t>(kv_head) * block_size_ * head_dim_;
    if (type_ == kernels::KvType::kQ8) return PutQ8(value, layer, block, slot, kv_head, tile, x);
    // Element i at tile + slot * head_dim + i, or tile + i * block_size + slot (transposed K).
    const bool transposed = !value && k_transposed_;
    const size_t at = tile + (transposed ? slot : static_cast<size_t>(slot) * head_dim_);
    const size_t step = transposed ? block_size_ : 1;
    uint8_t* dst = (value ? v_ : k_).data() + at * elem_;
    if (type_ == kernels::KvType::kF32) {
      auto* f = reinterpret_cast<float*>(dst);
      for (int i = 0; i < head_dim_; ++i) f[i * step] = x[i];
    } else {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int i = 0; i < head_dim_; ++i) h[i * step] = kernels::Fp32ToFp16(x[i]);
    }
  }

  // What CopyBlockOut writes: bytes() / n_blocks() without slides.
  size_t block_bytes() const {
    int full = 0;
    for (int l = 0; l < n_layer_; ++l) full += !InSlides(l);
    return BlockBytes(full, block_size_, n_kv_, head_dim_, type_);
  }
  // Copies every layer's K and V (and q8 scales) of `block` to `dst`
  // (block_bytes()), or back from `src`.
  void CopyBlockOut(int block, uint8_t* dst) const {
    Tiles(*this, block, [&](const void* tile, size_t bytes) {
      std::memcpy(dst, tile, bytes);
      dst += bytes;
    });
  }
  void CopyBlockIn(int block, const uint8_t* src) {
    Tiles(*this, block, [&](void* tile, size_t bytes) {
      std::memcpy(tile, src, bytes);
      src += bytes;
    });
  }

  // One layer's cache as the attention kernel reads it (block_table left unset).
  kernels::PagedKv Layer(int layer) const {
    kernels::PagedKv p;
    p.k = k_.data() + Offset(layer, 0) * elem_;
    p.v = v_.data() + Offset(layer, 0) * elem_;
    p.block_size = block_size_;
    p.block_stride = static_cast<int64_t>(block_size_) * n_kv_ * head_dim_;
    p.head_stride = static_cast<int64_t>(block_size_) * head_dim_;
    p.row_stride = head_dim_;
    p.k_transposed = k_transposed_;
    p.type = type_;
    if (type_ == kernels::KvType::kQ8) {
      p.k_scale = k_scale_.data() + ScaleOffset(layer, 0);
      p.v_scale = v_scale_.data() + ScaleOffset(layer, 0);
      p.scale_block_stride = static_cast<int64_t>(n_kv_) * block_size_;
    }
    return p;
  }

 private:
  // kQ8: int8 with one scale per row, in kernels/attention.h's packed tiles
  // (K as q + 128 in 4-dimension groups, V in 4-slot groups).
  void PutQ8(bool value, int layer, int block, int slot, int kv_head, size_t tile, const float* x) {
    const float scale = kernels::StoreRowQ8(x, head_dim_, block_size_, slot, value,
                                            (value ? v_ : k_).data() + tile);
    (value ? v_scale_ : k_scale_)[ScaleOffset(layer, block) +
                                  static_cast<size_t>(kv_head) * block_size_ + slot] = scale;
  }

  // Calls f(tile, bytes) for one block's tiles in layer order: K, V, then
  // (q8) K and V scales; a const store gives const tiles.
  template <typename Store, typename F>
  static void Tiles(Store& s, int block, F&& f) {
    const size_t tile = static_cast<size_t>(s.block_size_) * s.n_kv_ * s.head_dim_ * s.elem_;
    const size_t scales = s.type_ == kernels::KvType::kQ8
                              ? static_cast<size_t>(s.block_size_) * s.n_kv_ * sizeof(float)
                              : 0;
    for (int layer = 0; layer < s.n_layer_; ++layer) {
      if (s.InSlides(layer)) continue;
      const size_t at = s.Offset(layer, block) * s.elem_;
      f(s.k_.data() + at, tile);
      f(s.v_.data() + at, tile);
      if (scales == 0) continue;
      f(s.k_scale_.data() + s.ScaleOffset(layer, block), scales);
      f(s.v_scale_.data() + s.ScaleOffset(layer, block), scales);
    }
  }

  // First element of (layer, block), and its first row scale (kQ8: one per slot and KV head).
  size_t Offset(int layer, int block) const { return ScaleOffset(layer, block) * head_dim_; }
  size_t ScaleOffset(int layer, int block) const {
    return (layer_base_[layer] + block) * block_size_ * n_kv_;
  }
  // Per layer whether it is kept in blocks (not in slides).
  static std::vector<bool> FullLayers(int n_layer, int n_slides, const std::vector<bool>& sliding) {
    std::vector<bool> full(n_layer, true);
    for (int l = 0; l < n_layer && l < static_cast<int>(sliding.size()); ++l)
      full[l] = n_slides == 0 || !sliding[l];
    return full;
  }
  // Per layer its first block in the store, and the total after the last.
  static std::vector<size_t> LayerBases(const std::vector<bool>& full, int n_blocks, int n_slides) {
    std::vector<size_t> base(1, 0);
    for (bool f : full) base.push_back(base.back() + static_cast<size_t>(f ? n_blocks : n_slides));
    return base;
  }
  int n_layer_, n_blocks_, n_slides_, block_size_, n_kv_, head_dim_;
  kernels::KvType type_;
  bool k_transposed_;
  size_t elem_;
  std::vector<bool> full_;  // per layer: not in slides
  std::vector<size_t> layer_base_;
  // Zeroed, and touched only as blocks fill (a pool sized from memory costs
  // what its sequences use).
  kernels::ZeroedBuffer<uint8_t> k_, v_;
  kernels::ZeroedBuffer<float> k_scale_, v_scale_;  // kQ8 only
};

}  // namespace braid
