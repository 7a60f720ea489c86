// Dispatched entry points of kernels/ops.h. RmsNorm, SwiGlu, DotF32 and Axpy
// have AVX2 versions; Rope and Softmax are small per token and use the reference.
#include "kernels/ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/kernel_table.h"
#include "kernels/attention.h"
#include "ref/ref.h"

namespace braid::kernels {

void RmsNorm(const float* x, const float* w, float eps, int64_t n, float* y) {
  cpu::Kernels().rms_norm(x, w, eps, n, y);
}
void Rope(float* x, int n_rot, int64_t pos, const float* inv_freq, bool neox) {
  ref::Rope(x, n_rot, pos, inv_freq, neox);
}
void RopeCosSin(int n_rot, int64_t pos, const float* inv_freq, float* cos, float* sin) {
  ref::RopeCosSin(n_rot, pos, inv_freq, cos, sin);
}
void RopeApply(float* x, int n_rot, const float* cos, const float* sin, bool neox) {
  cpu::Kernels().rope_apply(x, n_rot, cos, sin, neox);
}
void Softmax(float* x, int64_t n) { ref::Softmax(x, n); }
void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  cpu::Kernels().swiglu(gate, up, n, out);
}
void GeGluTanh(const float* gate, const float* up, int64_t n, float* out) {
  ref::GeGluTanh(gate, up, n, out);
}
float DotF32(const float* a, const float* b, int64_t n) { return cpu::Kernels().dot_f32(a, b, n); }
void Axpy(float a, const float* x, int64_t n, float* y) { cpu::Kernels().axpy(a, x, n, y); }
int64_t Argmax(const float* x, int64_t n) { return cpu::Kernels().argmax(x, n); }

void AttendPaged(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head, int len,
                 float scale, float* scratch, float* out, const AttendNext* next) {
  const cpu::KernelTable& t = cpu::Kernels();
  if (next != nullptr) {
    if (t.attend_next != nullptr &&
        t.attend_next(q, n_q, head_dim, kv, kv_head, len, scale, scratch, out, *next))
      return;
    PagedKv nk = kv;
    nk.block_table = next->block_table;
    AttendPrefetch(nk, head_dim, next->kv_head, next->len);
  }
  t.attend(q, n_q, head_dim, kv, kv_head, len, scale, scratch, out);
}

namespace {

// AttendPagedFrom off a block boundary where the kernels cannot read the
// rows in place: the window's rows, elements (and q8 scales) as they are,
// moved into tiles of this thread's own in the cache's layout that start at
// the window, which the dispatched kernels read. Rows move in runs that
// stay within one source and one destination block: per run, a copy per
// row (position-major), per dimension (dimension-major K) or per group of
// 4 dimensions (q8 K); q8 V, whose 4-slot groups a shift splits, per element.
void AttendMovedWindow(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head,
                       int first, int len, float scale, float* scratch, float* out) {
  thread_local std::vector<uint8_t> k, v;
  thread_local std::vector<float> k_scale, v_scale;
  thread_local std::vector<int32_t> table;
  const int n = len - first, bs = kv.block_size, hd = head_dim;
  const bool q8 = kv.type == KvType::kQ8;
  const size_t e = KvElementBytes(kv.type);
  const int blocks = (n + bs - 1) / bs;
  const size_t tile = static_cast<size_t>(bs) * hd;  // elements of one head's block
  // Padding slots read as zero values (q8 K stores q + 128) with zero scales.
  k.assign(blocks * tile * e, q8 ? 128 : 0);
  v.assign(blocks * tile * e, 0);
  if (q8) {
    k_scale.assign(static_cast<size_t>(blocks) * bs, 0.0f);
    v_scale.assign(static_cast<size_t>(blocks) * bs, 0.0f);
  }
  table.resize(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = b;
  PagedKv g;
  g.k = k.data();
  g.v = v.data();
  g.block_table = table.data();
  g.block_size = bs;
  g.block_stride = static_cast<int64_t>(tile);
  g.head_stride = static_cast<int64_t>(tile);
  g.row_stride = hd;
  g.k_transposed = kv.k_transposed;
  g.type = kv.type;
  if (q8) {
    g.k_scale = k_scale.data();
    g.v_scale = v_scale.data();
    g.scale_block_stride = bs;
  }
  const auto* ks = static_cast<const uint8_t*>(kv.k);
  const auto* vs = static_cast<const uint8_t*>(kv.v);
  for (int i = 0; i < n;) {
    const int j = first + i, s = j % bs, t = i % bs;
    const int run = std::min({bs - s, bs - t, n - i});
    if (q8) {
      const uint8_t* kt = ks + kv.TileOffset(kv_head, j);
      const uint8_t* vt = vs + kv.TileOffset(kv_head, j);
      uint8_t* kd = k.data() + g.TileOffset(0, i);
      uint8_t* vd = v.data() + g.TileOffset(0, i);
      for (int d = 0; d < hd; d += 4)
        std::memcpy(kd + d * bs + 4 * t, kt + d * bs + 4 * s, 4 * run);
      for (int r = 0; r < run; ++r) {
        const int sr = s + r, tr = t + r;
        for (int d = 0; d < hd; ++d)
          vd[(tr / 4) * 4 * hd + 4 * d + tr % 4] = vt[(sr / 4) * 4 * hd + 4 * d + sr % 4];
        k_scale[i + r] = kv.k_scale[kv.ScaleOffset(kv_head, j + r)];
        v_scale[i + r] = kv.v_scale[kv.ScaleOffset(kv_head, j + r)];
      }
    } else {
      if (kv.k_transposed) {
        for (int d = 0; d < hd; ++d)
          std::memcpy(k.data() + e * (g.KOffset(0, i) + d * g.KDimStride()),
                      ks + e * (kv.KOffset(kv_head, j) + d * kv.KDimStride()), e * run);
      } else {
        for (int r = 0; r < run; ++r)
          std::memcpy(k.data() + e * g.Offset(0, i + r), ks + e * kv.Offset(kv_head, j + r),
                      e * hd);
      }
      for (int r = 0; r < run; ++r)
        std::memcpy(v.data() + e * g.Offset(0, i + r), vs + e * kv.Offset(kv_head, j + r), e * hd);
    }
    i += run;
  }
  AttendPaged(q, n_q, head_dim, g, 0, n, scale, scratch, out);
}

}  // namespace

void AttendPagedFrom(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head,
                     int first, int len, float scale, float* scratch, float* out) {
  if (first % kv.block_size == 0) {
    PagedKv from = kv;
    from.block_table = kv.block_table + first / kv.block_size;
    return AttendPaged(q, n_q, head_dim, from, kv_head, len - first, scale, scratch, out);
  }
  // Off a block boundary: position-major fp32 and fp16 rows read where they
  // lie; the others moved to tiles that start at the window.
  const auto from = cpu::Kernels().attend_from;
  if (from != nullptr && from(q, n_q, head_dim, kv, kv_head, first, len, scale, scratch, out))
    return;
  AttendMovedWindow(q, n_q, head_dim, kv, kv_head, first, len, scale, scratch, out);
}

float StoreRowQ8(const float* x, int head_dim, int block_size, int slot, bool value,
                 uint8_t* tile) {
  return cpu::Kernels().store_row_q8(x, head_dim, block_size, slot, value, tile);
}

// Every K tile of the item, into L2 (the kernel's own prefetch brings the
// lines on to L1 just ahead of use): measured (attention_bench) ~10% more
// bytes/s than the first tiles only, and more than fetching V as well.
void AttendPrefetch(const PagedKv& kv, int head_dim, int kv_head, int len) {
  const size_t elem = KvElementBytes(kv.type);
  const size_t tile =
      elem * static_cast<size_t>(kv.block_size) * head_dim;  // one head's rows of a block
  for (int j = 0; j < len; j += kv.block_size) {
    const char* p =
        static_cast<const char*>(kv.k) + elem * static_cast<size_t>(kv.TileOffset(kv_head, j));
    for (size_t o = 0; o < tile; o += 64) __builtin_prefetch(p + o, 0, 2);
  }
}

bool AttentionFastTransposedK(int head_dim, int block_size) {
  const auto fast = cpu::Kernels().attend_fast_transposed;
  return fast != nullptr && fast(head_dim, block_size);
}

bool AttentionFastQ8(int head_dim, int block_size) {
  return AttentionFastTransposedK(head_dim, block_size);  // the same tiles of 16 slots
}

bool AttentionFastF16(int head_dim) {
  const auto fast = cpu::Kernels().attend_fast_f16;
  return fast != nullptr && fast(head_dim);
}

}  // namespace braid::kernels
