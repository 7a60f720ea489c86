// Weight-matrix x activation-batch products (see kernels/matmul.h). Every
// y[t, r] is computed by the same fp32 operations whatever the batch and the
// row range (batch invariance, docs/kernels.md): through the decode kernels
// for every token where the type has them, else through `dot`, in tiles so
// that both operands of the inner kernel stay in L1 (kTileRows weight rows
// swept by groups of kTileTokens activation rows).
#include "kernels/matmul.h"

#include <algorithm>
#include <cassert>

#include "cpu/kernel_table.h"
#include "kernels/quant.h"
#include "ref/ref.h"

namespace braid::kernels {
namespace {

// Weight rows per tile: 16 rows of 576 Q4_1 columns are ~6 KB, well inside L1.
constexpr int64_t kTileRows = 16;
// Longest row the decode path rearranges on the stack (73 KB); longer rows use `dot`.
constexpr int64_t kMaxDecodeCols = 32768;
// Stack workspace for prepared activation rows: at least one row of
// kMaxDecodeCols, ~70 rows of 576 columns.
constexpr size_t kWorkspaceBytes = 160 * 1024;
static_assert(kWorkspaceBytes >= cpu::DecodeWorkspaceStride(kMaxDecodeCols));

// The group kernels of an interleaved matrix at `act_type`, or nullptr.
const cpu::GroupKernel* FindGroup(const MatrixView& w, DType act_type) {
  const auto id = static_cast<uint32_t>(w.type);
  if (w.layout != WeightLayout::kInterleaved16 || id >= cpu::kWeightTypeSlots) return nullptr;
  const cpu::GroupKernel* gk = &cpu::Kernels().group[cpu::PrecisionSlot(act_type)][id];
  return gk->run != nullptr ? gk : nullptr;
}

}  // namespace

bool HasPreparedPath(const MatrixView& w, DType act_type) {
  return FindGroup(w, act_type) != nullptr;
}

size_t PreparedBytes(int64_t cols, int n_tokens) {
  // Whole passes (fewer tokens than a pass: one pass of them all).
  constexpr int kPass = cpu::kGroupPassTokens;
  const int slots = n_tokens <= kPass ? n_tokens : (n_tokens + kPass - 1) / kPass * kPass;
  return static_cast<size_t>(slots) * cpu::DecodeWorkspaceStride(cols);
}

void PrepareRows(const MatrixView& w, DType act_type, const void* xq, size_t xq_row_bytes, int t0,
                 int t1, int n_tokens, uint8_t* out) {
  const cpu::GroupKernel* gk = FindGroup(w, act_type);
  assert(gk != nullptr && 0 <= t0 && t1 <= n_tokens);
  for (int t = t0; t < t1; ++t)
    gk->prepare(w.cols, static_cast<const char*>(xq) + static_cast<size_t>(t - t0) * xq_row_bytes,
                out, t, n_tokens);
}

void MatMulPrepared(const MatrixView& w, DType act_type, const uint8_t* prepared, int n_tokens,
                    int64_t r0, int64_t r1, float* y, int64_t ldy, bool accumulate) {
  const cpu::GroupKernel* gk = FindGroup(w, act_type);
  assert(gk != nullptr && r0 % 16 == 0 && (r1 % 16 == 0 || r1 == w.rows));
  if (r0 >= r1 || n_tokens <= 0) return;
  const size_t gbytes = 16 * w.row_bytes;
  const int64_t ngroups = (r1 - r0 + 15) / 16;
  const int valid_last = static_cast<int>(r1 - r0 - 16 * (ngroups - 1));
  gk->run(w.cols, static_cast<const uint8_t*>(w.data) + gbytes * (r0 / 16), gbytes, ngroups,
          valid_last, prepared, n_tokens, y + r0, ldy, accumulate);
}

// Interleaved weights: tokens prepared a chunk at a time on the stack, then
// each 16-row group meets them (cpu/gemm16_avx512.cpp), or the scalar
// reference where the SIMD kernels are absent or one prepared row would not
// fit the stack workspace (rows longer than kMaxDecodeCols).
static void MatMulInterleaved(const MatrixView& w, DType act_type, const char* x,
                              size_t xq_row_bytes, int n_tokens, int64_t r0, int64_t r1, float* y,
                              int64_t ldy) {
  if (FindGroup(w, act_type) == nullptr || w.cols > kMaxDecodeCols) {
    ref::MatMulInterleaved(w.type, w.data, w.cols, act_type, x, xq_row_bytes, n_tokens, r0, r1, y,
                           ldy);
    return;
  }
  alignas(64) uint8_t ws[kWorkspaceBytes];
  const int chunk = static_cast<int>(std::min<size_t>(
      cpu::kGroupPassTokens, std::max<size_t>(1, sizeof(ws) / PreparedBytes(w.cols, 1))));
  for (int t0 = 0; t0 < n_tokens; t0 += chunk) {
    const int nt = std::min(chunk, n_tokens - t0);
    PrepareRows(w, act_type, x + static_cast<size_t>(t0) * xq_row_bytes, xq_row_bytes, 0, nt, nt,
                ws);
    MatMulPrepared(w, act_type, ws, nt, r0, r1, y + static_cast<int64_t>(t0) * ldy, ldy);
  }
}

bool InterleaveFast(DType type) {
  const auto id = static_cast<uint32_t>(type);
  if (!ref::Interleavable(type) || id >= cpu::kWeightTypeSlots) return false;
  const cpu::KernelTable& t = cpu::Kernels();
  return t.group[0][id].run != nullptr && t.group[1][id].run != nullptr;
}

size_t InterleavedBytes(DType type, int64_t rows, int64_t cols) {
  return ref::InterleavedGroupBytes(type, cols) * static_cast<size_t>((rows + 15) / 16);
}

MatrixView Interleave(const MatrixView& w, void* dst) {
  assert(w.layout == WeightLayout::kRows && ref::Interleavable(w.type));
  ref::Interleave(w.type, w.data, w.row_bytes, w.rows, w.cols, dst);
  MatrixView v = w;
  v.data = dst;
  v.layout = WeightLayout::kInterleaved16;
  return v;
}

// y[t * ldy + r] = dot(W[r, :], xq[t])     W: [rows, cols], xq: n_tokens quantized rows,
//                                          r in [r0, r1), t in [0, n_tokens)
void MatMulQuantized(const MatrixView& w, DType act_type, const void* xq, size_t xq_row_bytes,
                     int n_tokens, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  assert(act_type == ActivationType(w.type, cpu::IsSplit16(act_type) ? ActPrecision::kSplit16
                                                                     : ActPrecision::kInt8));
  if (w.layout == WeightLayout::kInterleaved16) {
    MatMulInterleaved(w, act_type, static_cast<const char*>(xq), xq_row_bytes, n_tokens, r0, r1, y,
                      ldy);
    return;
  }
  const cpu::KernelTable& table = cpu::Kernels();
  const cpu::DotFn dot = cpu::FindDot(table, w.type, act_type);
  assert(dot != nullptr);
  const char* base = static_cast<const char*>(w.data);
  const char* x = static_cast<const char*>(xq);
  const cpu::DecodeKernel* dk = cpu::FindDecode(table, w.type, act_type);
  if (dk != nullptr && dk->rows != nullptr && w.cols <= kMaxDecodeCols) {
    // Every token goes through the decode kernels (prepared activation rows),
    // so y[t, r] is computed by the same fp32 operations for any batch
    // (batch invariance; kernel_table.h): one token streams the weight rows;
    // several tokens are prepared a chunk at a time and meet each weight row
    // together (rows_multi), or, without rows_multi, one after the other over
    // tiles of kTileRows weight rows that stay in L1.
    alignas(64) uint8_t ws[kWorkspaceBytes];
    const size_t wss = cpu::DecodeWorkspaceStride(w.cols);
    const int chunk = static_cast<int>(std::max<size_t>(1, sizeof(ws) / wss));
    const auto* wbase = reinterpret_cast<const uint8_t*>(base);
    for (int t0 = 0; t0 < n_tokens; t0 += chunk) {
      const int nt = std::min(chunk, n_tokens - t0);
      for (int t = 0; t < nt; ++t)
        dk->prepare(w.cols, x + static_cast<size_t>(t0 + t) * xq_row_bytes, ws + t * wss);
      float* yt = y + static_cast<int64_t>(t0) * ldy;
      if (nt == 1) {
        dk->rows(w.cols, wbase + r0 * w.row_bytes, w.row_bytes, r1 - r0, ws, yt + r0);
      } else if (dk->rows_multi != nullptr) {
        dk->rows_multi(w.cols, wbase + r0 * w.row_bytes, w.row_bytes, r1 - r0, ws, wss, nt, yt + r0,
                       ldy);
      } else {
        for (int64_t rt = r0; rt < r1; rt += kTileRows) {
          const int64_t re = std::min(r1, rt + kTileRows);
          for (int t = 0; t < nt; ++t)
            dk->rows(w.cols, wbase + rt * w.row_bytes, w.row_bytes, re - rt, ws + t * wss,
                     yt + t * ldy + rt);
        }
      }
    }
    return;
  }
  // The dot kernels compute each token with the same operations for any nx.
  if (n_tokens <= cpu::kTileTokens) {
    // Decode (and tiny batches): one streaming pass over the rows.
    for (int64_t r = r0; r < r1; ++r) {
      dot(w.cols, base + r * w.row_bytes, x, xq_row_bytes, n_tokens, y + r, ldy);
    }
    return;
  }
  for (int64_t rt = r0; rt < r1; rt += kTileRows) {
    const int64_t re = std::min(r1, rt + kTileRows);
    for (int t0 = 0; t0 < n_tokens; t0 += cpu::kTileTokens) {
      const int nx = std::min(cpu::kTileTokens, n_tokens - t0);
      const char* xt = x + static_cast<size_t>(t0) * xq_row_bytes;
      for (int64_t r = rt; r < re; ++r) {
        dot(w.cols, base + r * w.row_bytes, xt, xq_row_bytes, nx, y + t0 * ldy + r, ldy);
      }
    }
  }
}

void PrefetchRows(const MatrixView& w, int64_t r0, int64_t r1) {
  if (r0 >= r1) return;
  const auto* base = static_cast<const char*>(w.data);
  size_t begin, end;
  if (w.layout == WeightLayout::kInterleaved16) {
    begin = static_cast<size_t>(r0 / 16) * 16 * w.row_bytes;
    end = static_cast<size_t>((r1 + 15) / 16) * 16 * w.row_bytes;
  } else {
    begin = static_cast<size_t>(r0) * w.row_bytes;
    end = static_cast<size_t>(r1) * w.row_bytes;
  }
  for (size_t o = begin & ~size_t{63}; o < end; o += 64) __builtin_prefetch(base + o, 0, 2);
}

// Dequantizes each weight row once into `scratch` and dots it with every token in fp32.
void MatMulF32(const MatrixView& w, const float* x, int n_tokens, int64_t r0, int64_t r1, float* y,
               int64_t ldy, float* scratch) {
  assert(w.layout == WeightLayout::kRows);  // the exact path reads GGUF rows
  const auto dot = cpu::Kernels().dot_f32;
  const char* base = static_cast<const char*>(w.data);
  for (int64_t r = r0; r < r1; ++r) {
    const float* row;
    if (w.type == DType::kF32) {
      row = reinterpret_cast<const float*>(base + r * w.row_bytes);
    } else {
      ref::DequantizeRow(w.type, base + r * w.row_bytes, scratch, w.cols);
      row = scratch;
    }
    for (int t = 0; t < n_tokens; ++t) y[t * ldy + r] = dot(row, x + t * w.cols, w.cols);
  }
}

}  // namespace braid::kernels
