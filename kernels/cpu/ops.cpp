// Dispatched entry points of kernels/ops.h. RmsNorm, SwiGlu, DotF32 and Axpy
// have AVX2 versions; Rope and Softmax are small per token and use the reference.
#include "kernels/ops.h"

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

void AttendPagedFrom(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head,
                     int first, int len, float scale, float* scratch, float* out) {
  if (first % kv.block_size == 0) {
    PagedKv from = kv;
    from.block_table = kv.block_table + first / kv.block_size;
    return AttendPaged(q, n_q, head_dim, from, kv_head, len - first, scale, scratch, out);
  }
  if (kv.type == KvType::kQ8)
    return ref::AttendPagedFrom(q, n_q, head_dim, kv, kv_head, first, len, scale, scratch, out);
  // Off a block boundary: position-major rows read where they lie; else
  // (dimension-major K) the window's rows gathered as fp32 (exact from
  // fp16) into blocks of this thread's own, which the dispatched kernels read.
  const auto from = cpu::Kernels().attend_from;
  if (from != nullptr && from(q, n_q, head_dim, kv, kv_head, first, len, scale, scratch, out))
    return;
  thread_local std::vector<float> k, v;
  thread_local std::vector<int32_t> table;
  const int n = len - first, bs = kv.block_size;
  const int blocks = (n + bs - 1) / bs;
  const size_t rows = static_cast<size_t>(blocks) * bs;
  k.resize(rows * head_dim);
  v.resize(rows * head_dim);
  table.resize(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = b;
  auto gather = [&](const void* base, int64_t off, int64_t step, float* to) {
    if (kv.type == KvType::kF32) {
      const float* from = static_cast<const float*>(base) + off;
      for (int i = 0; i < head_dim; ++i) to[i] = from[i * step];
    } else {
      const uint16_t* from = static_cast<const uint16_t*>(base) + off;
      for (int i = 0; i < head_dim; ++i) to[i] = Fp16ToFp32(from[i * step]);
    }
  };
  for (int j = 0; j < n; ++j) {
    gather(kv.k, kv.KOffset(kv_head, first + j), kv.KDimStride(), &k[size_t(j) * head_dim]);
    gather(kv.v, kv.Offset(kv_head, first + j), 1, &v[size_t(j) * head_dim]);
  }
  PagedKv g;
  g.k = k.data();
  g.v = v.data();
  g.block_table = table.data();
  g.block_size = bs;
  g.block_stride = static_cast<int64_t>(bs) * head_dim;
  g.head_stride = 0;
  g.row_stride = head_dim;
  g.type = KvType::kF32;
  AttendPaged(q, n_q, head_dim, g, 0, n, scale, scratch, out);
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
