// Decode attention over a paged KV cache, fused: scores, softmax and the
// weighted sum of values for the query heads that share one KV head (GQA),
// reading each cached K and V row once for all of them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::kernels {

// One layer's paged K and V: position j of a sequence lives in block
// b = block_table[j / block_size], slot j % block_size, and its row of KV
// head g starts at element
//   b * block_stride + g * head_stride + (j % block_size) * row_stride
// of v, and of k unless `k_transposed`. With head_stride = block_size *
// head_dim and row_stride = head_dim (KvStore's layout) a head's rows in a
// block are contiguous, so attention streams them. With `k_transposed`, each
// (block, head) tile of K is stored dimension-major: element d of position j
// at b * block_stride + g * head_stride + d * block_size + j % block_size (one
// vector load then holds a dimension of 16 positions). Non-owning.
// Element type of the cached rows: fp32, or fp16 (half the bytes that decode
// attention reads per position; values rounded to nearest even on store).
//
// kQ8: int8 elements with one fp32 scale per (position, KV head) row
// (value = q * scale, scale = amax / 127): a quarter of fp32's bytes, in
// tiles packed for integer dot products (block_size and head_dim multiples of
// 4; `k_transposed` and `row_stride` do not apply). With tile = block *
// block_stride + kv_head * head_stride (head_stride = block_size * head_dim):
//   K, element d of slot s: tile + (d / 4) * 4 * block_size + 4 * s + d % 4,
//      stored as q + 128 (uint8): a group of 4 dimensions of every slot
//   V, element d of slot s: tile + (s / 4) * 4 * head_dim + 4 * d + s % 4,
//      int8: a group of 4 slots of every dimension
// Attention over a kQ8 cache quantizes its other operands as well, so that
// both products are exact int32 dot products (AttendPaged below).
enum class KvType { kF32, kF16, kQ8 };
// Bytes of one cached element (kQ8: not counting the row scales).
inline constexpr size_t KvElementBytes(KvType t) {
  return t == KvType::kF32 ? 4 : t == KvType::kF16 ? 2 : 1;
}

struct PagedKv {
  const void* k = nullptr;  // float or uint16_t (fp16) elements, per `type`
  const void* v = nullptr;
  const int32_t* block_table = nullptr;
  int block_size = 0;
  int64_t block_stride = 0;   // elements between consecutive blocks
  int64_t head_stride = 0;    // elements between KV heads within a block
  int64_t row_stride = 0;     // elements between consecutive slots of one head
  bool k_transposed = false;  // K tiles dimension-major (above)
  KvType type = KvType::kF32;
  // kQ8 only: the rows' scales, position j of KV head g at
  // b * scale_block_stride + g * block_size + j % block_size.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int64_t scale_block_stride = 0;

  // Element offset of position j's row of KV head `kv_head` (V; K unless transposed).
  int64_t Offset(int kv_head, int j) const {
    return static_cast<int64_t>(block_table[j / block_size]) * block_stride +
           static_cast<int64_t>(kv_head) * head_stride +
           static_cast<int64_t>(j % block_size) * row_stride;
  }
  // Element offset of element 0 of position j's K row, and the stride between its elements.
  int64_t KOffset(int kv_head, int j) const {
    if (!k_transposed) return Offset(kv_head, j);
    return static_cast<int64_t>(block_table[j / block_size]) * block_stride +
           static_cast<int64_t>(kv_head) * head_stride + j % block_size;
  }
  int64_t KDimStride() const { return k_transposed ? block_size : 1; }
  // Element offset of the (block, KV head) tile holding position j.
  int64_t TileOffset(int kv_head, int j) const {
    return static_cast<int64_t>(block_table[j / block_size]) * block_stride +
           static_cast<int64_t>(kv_head) * head_stride;
  }
  int64_t ScaleOffset(int kv_head, int j) const {
    return static_cast<int64_t>(block_table[j / block_size]) * scale_block_stride +
           static_cast<int64_t>(kv_head) * block_size + j % block_size;
  }
};

// For each of the n_q query heads h (rows of q: [n_q, head_dim], contiguous)
// against KV head `kv_head` over positions j in [0, len):
//   s_hj = scale * (q_h . k_j),  p_hj = exp(s_hj - max_j s_hj) / sum_j exp(...),
//   out_h = sum_j p_hj v_j                               out: [n_q, head_dim]
// scratch: n_q * len floats. Each head's numbers come from the same fp32
// operations whatever n_q and whatever the batch (batch invariance).
//
// Over a kQ8 cache: q_h is quantized to int8 (qs = amax / 127, round to
// nearest even) and each score is an integer dot product,
//   s_hj = float(sum_d qi_d (k8_jd + 128) - 128 sum_d qi_d) * (kscale_j * (qs * scale));
// then e_hj = exp(s_hj - max_j s_hj) and w_hj = e_hj * vscale_j are quantized
// to uint8 against their maximum (u_hj = round(w_hj * (255 / wmax))), and
//   out_h = float(sum_j u_hj v8_j) * (wmax / 255 * (1 / sum_j e_hj)),
// the integer sums taken over runs of at most 65536 positions (no int32
// overflow) and added in position order.
// Pure; any thread. len >= 1.
// Every kernel table accepts both types; fp16 is fast (read and converted in
// registers) only where this returns true for the dispatched kernels, and falls
// back to the scalar reference elsewhere.
bool AttentionFastF16(int head_dim);
// Whether the dispatched kernels read dimension-major K tiles fast (else the
// reference takes them).
bool AttentionFastTransposedK(int head_dim, int block_size);
// Whether they read int8 (kQ8) caches fast.
bool AttentionFastQ8(int head_dim, int block_size);

// next (optional): the item the calling thread attends after this one, in the
// same layer (`kv` with next->block_table). A hint, with no effect on any
// result: the q8 kernels fetch its rows into L2 a few lines at a time
// throughout this item's work, so that memory stays busy while this item
// computes, and take this item's own rows to be on their way already
// (fetched by the call before it, or by AttendPrefetch); for the other
// kernels its K rows are fetched before this item, as AttendPrefetch does.
struct AttendNext {
  const int32_t* block_table;
  int kv_head;
  int len;
};
void AttendPaged(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head, int len,
                 float scale, float* scratch, float* out, const AttendNext* next = nullptr);

// AttendPaged over positions [first, len) only (a sliding window; scratch:
// n_q * (len - first) floats), 0 <= first < len. With `first` a multiple of
// the block size, the dispatched kernels run on the blocks from there on.
// Otherwise the vector kernel reads position-major fp32 rows, and fp16 rows
// of whole-vector head sizes, where they lie; the rows of other caches
// (dimension-major K, kQ8) are moved as they are (elements and scales) to
// tiles that start at `first`, for the dispatched kernels. Blocks before
// `first` are never read.
void AttendPagedFrom(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head,
                     int first, int len, float scale, float* scratch, float* out);

// Stores one row (head_dim values) of K (`value` false) or V at `slot` of a
// kQ8 (block, KV head) tile (the layout above; block_size and head_dim
// multiples of 4) and returns the row's scale s = amax / 127: element x is
// stored as round(x / s) (to nearest even) clamped to [-127, 127] (plus 128
// for K); a NaN element as -127; an all-zero row as zeros with s = 0. Writes
// the row's bytes only, so threads may store different slots of one tile at once.
float StoreRowQ8(const float* x, int head_dim, int block_size, int slot, bool value, uint8_t* tile);

// Starts fetching the cached K rows that AttendPaged(..., kv, kv_head,
// len, ...) will read, so that a caller can overlap that wait with the work
// before it. A hint: no effect on any result.
void AttendPrefetch(const PagedKv& kv, int head_dim, int kv_head, int len);

}  // namespace braid::kernels
