// The table of kernels that runtime dispatch fills once per process: one entry
// per (activation precision, weight type) and op, pointing at AVX-512, AVX2 or
// scalar code. Internal.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/dtype.h"

namespace braid::kernels::cpu {

// Tokens that one weight row is dotted with per pass (prefill reuses each
// loaded weight block this many times).
inline constexpr int kTileTokens = 4;

// Weight type ids that index the tables (GGUF ids below this).
inline constexpr int kWeightTypeSlots = 32;
// Activation precisions: 0 = the int8 partners (and F32), 1 = split 16-bit.
inline constexpr int kPrecisionSlots = 2;

inline bool IsSplit16(DType act_type) {
  return act_type == DType::kQ16_0 || act_type == DType::kQ16_1 || act_type == DType::kQ16_K;
}
inline int PrecisionSlot(DType act_type) { return IsSplit16(act_type) ? 1 : 0; }

// s[t * ldy] = dot(w_row, x + t * x_stride) for t in [0, nx), 1 <= nx <= kTileTokens.
// w_row: n elements of the weight type; x: activation rows in its partner type.
using DotFn = void (*)(int64_t n, const void* w_row, const void* x, size_t x_stride, int nx,
                       float* s, int64_t ldy);

// Bytes of the decode workspace for rows of n elements (every DecodeKernel fits:
// at most 2 bytes per element of activation planes, 8 bytes per 32-element block
// of scales or sums, and a padding of a few blocks).
inline constexpr size_t DecodeWorkspaceBytes(int64_t n) {
  return static_cast<size_t>(n) * 9 / 4 + 1024;
}

// Single-token (decode) path: the activation row is rearranged once per matmul
// (`prepare`: scales to fp32, quants reordered so that several weight blocks
// meet their activations in one register), then `rows` streams many weight rows.
//   prepare: xq (activation type layout, n elements) -> ws (64-byte aligned,
//            DecodeWorkspaceBytes(n) bytes; layout private to the kernel pair)
//   rows:    y[r] = dot(W[r, :], x) for r in [0, nrows), W rows `row_bytes` apart
//   rows_multi (optional): the same for ntok prepared tokens (token t's
//            workspace at ws + t * wss), y[t * ldy + r]; each weight block is
//            unpacked once for several tokens.
// Batch invariance: `rows` and `rows_multi` compute every y[t, r] with the same
// sequence of fp32 operations, whatever nrows, the row's place in [0, nrows),
// ntok or t; so do `dot` kernels for every nx. MatMulQuantized relies on it.
struct DecodeKernel {
  void (*prepare)(int64_t n, const void* xq, uint8_t* ws) = nullptr;
  void (*rows)(int64_t n, const uint8_t* w, size_t row_bytes, int64_t nrows, const uint8_t* ws,
               float* y) = nullptr;
  void (*rows_multi)(int64_t n, const uint8_t* w, size_t row_bytes, int64_t nrows,
                     const uint8_t* ws, size_t wss, int ntok, float* y, int64_t ldy) = nullptr;
};

// Distance between the prepared workspaces of consecutive tokens (64-byte aligned).
inline constexpr size_t DecodeWorkspaceStride(int64_t n) {
  return (DecodeWorkspaceBytes(n) + 63) / 64 * 64;
}

// Decode kernels read their weight rows once, in order. On short rows (576
// columns of Q4_1 are 360 bytes) the hardware prefetcher alone kept one core at
// 60-70% of its read bandwidth (matmul_bench); prefetching the bytes this far
// ahead of the row being read gives 85-100%.
inline constexpr size_t kDecodePrefetchBytes = 8192;

// The weight-streaming variant in use (kernels/stream.h): true = kTemporal.
extern std::atomic<bool> g_stream_temporal;

// Prefetches the lines of [p, p + bytes) + kDecodePrefetchBytes. Past the end of
// the matrix this is a hint for addresses never dereferenced (prefetches do not
// fault); the address is formed as an integer for that reason.
// `once`: the lines are used once, right after they arrive (one pass over the
// weights); under StreamVariant::kNonTemporal they are then fetched
// non-temporal (prefetchnta), so that the stream does not push the KV cache
// and activations out of the caches (docs/kernels.md). Where a group of rows
// is read again by later passes over more tokens, non-temporal lines are gone
// by then, so those are always ordinary prefetches.
inline void PrefetchAhead(const void* p, size_t bytes, bool once = true) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) + kDecodePrefetchBytes;
  if (once && !g_stream_temporal.load(std::memory_order_relaxed)) {
    for (size_t o = 0; o < bytes; o += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(a + o), 0, 0);
  } else {
    for (size_t o = 0; o < bytes; o += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(a + o), 0, 3);
  }
}

// Interleaved weights (16-row groups, ref/interleave_ref.cpp) against several
// tokens:
//   prepare: one quantized row xq, token t of a batch of ntok, into its
//            places in the batch's buffer ws (ntok * DecodeWorkspaceStride(n)
//            bytes at most; the tokens are interleaved block by block)
//   run:     groups [0, ngroups) of an interleaved matrix (gbytes apart) against
//            the ntok prepared tokens: y[t * ldy + 16 g + i], the last group's
//            rows i >= valid_last left untouched; y = W x, or y += W x with
//            `accumulate`. Every (row, token) gets the reference's fp32
//            operations whatever ntok (batch invariance).
// Tokens per pass of the group kernels; the prepared activations interleave a
// batch's tokens in passes of this many (min(ntok, kGroupPassTokens)).
inline constexpr int kGroupPassTokens = 8;

struct GroupKernel {
  void (*prepare)(int64_t n, const void* xq, uint8_t* ws, int t, int ntok) = nullptr;
  void (*run)(int64_t n, const uint8_t* w, size_t gbytes, int64_t ngroups, int valid_last,
              const uint8_t* ws, int ntok, float* y, int64_t ldy, bool accumulate) = nullptr;
};

// x[0..n) -> one quantized activation row (n a multiple of the block size).
using QuantizeFn = void (*)(const float* x, void* dst, int64_t n);

struct KernelTable {
  const char* isa = "scalar";
  // [precision slot][GGUF type id of the weight]
  DotFn dot[kPrecisionSlots][kWeightTypeSlots] = {};
  DecodeKernel decode[kPrecisionSlots][kWeightTypeSlots] = {};  // empty where only `dot` exists
  GroupKernel group[kPrecisionSlots][kWeightTypeSlots] = {};  // interleaved weights, where present
  // Split 16-bit quantizers: [0] Q16_0, [1] Q16_1, [2] Q16_K.
  QuantizeFn quantize16[3] = {};
  // 8-bit quantizers: [0] Q8_0, [1] Q8_1.
  QuantizeFn quantize8[2] = {};
  void (*rms_norm)(const float* x, const float* w, float eps, int64_t n, float* y) = nullptr;
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out) = nullptr;
  void (*rope_apply)(float* x, int n_rot, const float* cos, const float* sin, bool neox) = nullptr;
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  void (*axpy)(float a, const float* x, int64_t n, float* y) = nullptr;
  int64_t (*argmax)(const float* x, int64_t n) = nullptr;
  void (*attend)(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head, int len,
                 float scale, float* scratch, float* out) = nullptr;
  // attend, fetching the thread's next item spread over this one's work;
  // false (nothing done) where the kernels do not (AttendPaged then fetches
  // the next item's K rows first, as AttendPrefetch does, and calls attend).
  bool (*attend_next)(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head,
                      int len, float scale, float* scratch, float* out,
                      const AttendNext& next) = nullptr;
  float (*store_row_q8)(const float* x, int head_dim, int block_size, int slot, bool value,
                        uint8_t* tile) = nullptr;
  // AttendPagedFrom off a block boundary, reading the rows where they lie;
  // false when it does not take this cache (null: none does).
  bool (*attend_from)(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head,
                      int first, int len, float scale, float* scratch, float* out) = nullptr;
  bool (*attend_fast_f16)(int head_dim) = nullptr;  // null: fp16 caches take the reference
  bool (*attend_fast_transposed)(int head_dim, int block_size) = nullptr;  // dimension-major K
};

// The table in use: the best the CPU supports, or scalar under ForceScalarKernels.
const KernelTable& Kernels();

// The dot kernel of weight type `w` with activations of `act`, or nullptr.
inline DotFn FindDot(const KernelTable& t, DType w, DType act) {
  const auto id = static_cast<uint32_t>(w);
  return id < kWeightTypeSlots ? t.dot[PrecisionSlot(act)][id] : nullptr;
}
inline const DecodeKernel* FindDecode(const KernelTable& t, DType w, DType act) {
  const auto id = static_cast<uint32_t>(w);
  return id < kWeightTypeSlots ? &t.decode[PrecisionSlot(act)][id] : nullptr;
}

// Tests only: use the AVX2 table even where AVX-512 VNNI is available (so both
// SIMD versions are checked on one machine). Returns false, changing nothing,
// where the CPU lacks AVX2. ForceScalarKernels takes precedence.
bool ForceAvx2Kernels(bool force);

// Overwrite entries with ISA-specific code (defined in *_avx2.cpp / *_avx512.cpp).
void FillAvx2VecDot(KernelTable* t);
void FillAvx2Ops(KernelTable* t);
void FillAvx2Quantize(KernelTable* t);
void FillAvx2Gemm16(KernelTable* t);
void FillAvx512VecDot(KernelTable* t);
void FillAvx512Decode16(KernelTable* t);
void FillAvx512Decode8(KernelTable* t);
void FillAvx512Gemm16(KernelTable* t);
void FillAvx512Quantize(KernelTable* t);
void FillAvx512Ops(KernelTable* t);
void FillAvx2Attention(KernelTable* t);
void FillAvx512Attention(KernelTable* t);

}  // namespace braid::kernels::cpu
