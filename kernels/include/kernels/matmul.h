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

struct MatrixView {
  DType type;
  int64_t rows;      // output features
  int64_t cols;      // input features (a multiple of the block size)
  const void* data;  // rows * row_bytes bytes
  size_t row_bytes;
};

// Fast path. `xq` holds n_tokens rows quantized with QuantizeActivations(act_type,
// ...), `xq_row_bytes` apart; act_type must be ActivationType(w.type, p) for some
// precision p (quant.h), and selects the int8 or the split 16-bit kernels.
// Reuses each loaded weight row for several tokens when n_tokens > 1.
void MatMulQuantized(const MatrixView& w, DType act_type, const void* xq, size_t xq_row_bytes,
                     int n_tokens, int64_t r0, int64_t r1, float* y, int64_t ldy);

// Exact path: fp32 activations [n_tokens, cols]; each weight row is
// dequantized to fp32 into `scratch` (cols floats, per thread) and dotted in fp32.
void MatMulF32(const MatrixView& w, const float* x, int n_tokens, int64_t r0, int64_t r1,
               float* y, int64_t ldy, float* scratch);

}  // namespace braid::kernels
