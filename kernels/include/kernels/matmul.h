// Matrix products of a weight matrix with a batch of activation rows.
//
// A weight matrix is stored as GGUF stores it: `rows` rows (output features),
// each `cols` elements (input features) of `type`, `row_bytes` apart.
// Activations are row-major [n_tokens, cols]; outputs are [n_tokens, ldy] with
// y[t * ldy + r] = dot(W[r, :], x[t, :]).
//
// Each function computes only rows [r0, r1) of W, so callers split the output
// features between threads without any further synchronisation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace braid::kernels {

// How a matrix's rows are stored: as GGUF stores them, or interleaved 16 rows
// at a time (Q4_1 and Q8_0 only, made by Interleave) for the multi-token
// kernels, where one int8 dot instruction covers 16 rows.
enum class WeightLayout { kRows, kInterleaved16 };

struct MatrixView {
  DType type;
  int64_t rows;      // output features
  int64_t cols;      // input features (a multiple of the block size)
  const void* data;  // rows * row_bytes bytes (kRows) or InterleavedBytes (kInterleaved16)
  size_t row_bytes;  // bytes of one row in `type` (a 16-row group is 16 row_bytes)
  WeightLayout layout = WeightLayout::kRows;
};

// Whether the kernels in use multiply interleaved matrices of `type` fast (at
// both precisions). Interleaved matrices work everywhere (the scalar reference
// takes them when the SIMD kernels are absent or forced off), but only pay here.
bool InterleaveFast(DType type);
// Bytes of the interleaved form of a rows x cols matrix of `type` (rows padded to 16).
size_t InterleavedBytes(DType type, int64_t rows, int64_t cols);
// Writes the interleaved form of `w` (kRows, Q4_1 or Q8_0) to dst
// (InterleavedBytes, 64-byte aligned) and returns its view.
MatrixView Interleave(const MatrixView& w, void* dst);

// Fast path. `xq` holds n_tokens rows quantized with QuantizeActivations(act_type,
// ...), `xq_row_bytes` apart; act_type must be ActivationType(w.type, p) for some
// precision p (quant.h), and selects the int8 or the split 16-bit kernels.
// Reuses each loaded weight row for several tokens when n_tokens > 1. For an
// interleaved matrix, r0 must be a multiple of 16 and r1 one too or w.rows.
void MatMulQuantized(const MatrixView& w, DType act_type, const void* xq, size_t xq_row_bytes,
                     int n_tokens, int64_t r0, int64_t r1, float* y, int64_t ldy);

// Prepared activations: the per-token work of MatMulQuantized on an
// interleaved matrix (rearranging each quantized row for the group kernels)
// done once, so that many row ranges share it (threads taking chunks of rows
// as they come). Only where HasPreparedPath holds; results are bit for bit
// those of MatMulQuantized.
bool HasPreparedPath(const MatrixView& w, DType act_type);
// Bytes of the prepared activations of a batch of n_tokens rows of `cols`
// elements (n_tokens times a multiple of 64).
size_t PreparedBytes(int64_t cols, int n_tokens);
// Tokens [t0, t1) of a batch of n_tokens: their quantized rows (xq_row_bytes
// apart, token t0's first) -> their places in the batch's prepared buffer
// `out` (the tokens are interleaved block by block, so that the kernels reach
// every token of a pass from one pointer). Disjoint token ranges may be
// prepared separately, by different threads (each depends on its own row only).
void PrepareRows(const MatrixView& w, DType act_type, const void* xq, size_t xq_row_bytes, int t0,
                 int t1, int n_tokens, uint8_t* out);
// y[t * ldy + r] for r in [r0, r1) (r0 a multiple of 16; r1 too or w.rows);
// with `accumulate`, y[t * ldy + r] += the same value (one fp32 add).
void MatMulPrepared(const MatrixView& w, DType act_type, const uint8_t* prepared, int n_tokens,
                    int64_t r0, int64_t r1, float* y, int64_t ldy, bool accumulate = false);

// Asks the caches (L2) for the bytes of rows [r0, r1) of `w` (for an
// interleaved matrix, the 16-row groups holding them), ahead of a matmul over
// them: work that leaves the memory bus idle (attention at decode) can hide
// the next matrix's fetch. A hint; nothing is read.
void PrefetchRows(const MatrixView& w, int64_t r0, int64_t r1);

// Exact path: fp32 activations [n_tokens, cols]; each weight row is
// dequantized to fp32 into `scratch` (cols floats, per thread) and dotted in fp32.
void MatMulF32(const MatrixView& w, const float* x, int n_tokens, int64_t r0, int64_t r1, float* y,
               int64_t ldy, float* scratch);

}  // namespace braid::kernels
