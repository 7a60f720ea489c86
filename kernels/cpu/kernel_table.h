// The table of kernels that runtime dispatch fills once per process: one entry
// per weight type and op, pointing at AVX-512, AVX2 or scalar code. Internal.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace braid::kernels::cpu {

// Tokens that one weight row is dotted with per pass (prefill reuses each
// loaded weight block this many times).
inline constexpr int kTileTokens = 4;

// s[t * ldy] = dot(w_row, x + t * x_stride) for t in [0, nx), 1 <= nx <= kTileTokens.
// w_row: n elements of the weight type; x: activation rows in its partner type.
using DotFn = void (*)(int64_t n, const void* w_row, const void* x, size_t x_stride, int nx,
                       float* s, int64_t ldy);

// Single-token (decode) path: the activation row is rearranged once per matmul
// (`prepare`: fp16 scales to fp32, quants reordered so that two weight blocks
// meet their activations in one register), then `rows` streams many weight rows.
//   prepare: xq (ActivationType layout, n elements) -> packed [n bytes], scales [2 * n/32]
//   rows:    y[r] = dot(W[r, :], x) for r in [0, nrows), W rows `row_bytes` apart
struct DecodeKernel {
  void (*prepare)(int64_t n, const void* xq, uint8_t* packed, float* scales) = nullptr;
  void (*rows)(int64_t n, const uint8_t* w, size_t row_bytes, int64_t nrows, const uint8_t* packed,
               const float* scales, float* y) = nullptr;
};

struct KernelTable {
  const char* isa = "scalar";
  DotFn dot[32] = {};  // indexed by GGUF type id of the weight
  DecodeKernel decode[32] = {};  // same index; empty where only `dot` exists
  void (*rms_norm)(const float* x, const float* w, float eps, int64_t n, float* y) = nullptr;
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out) = nullptr;
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  void (*axpy)(float a, const float* x, int64_t n, float* y) = nullptr;
};

// The table in use: the best the CPU supports, or scalar under ForceScalarKernels.
const KernelTable& Kernels();

// Overwrite entries with ISA-specific code (defined in *_avx2.cpp / *_avx512.cpp).
void FillAvx2VecDot(KernelTable* t);
void FillAvx2Ops(KernelTable* t);
void FillAvx512VecDot(KernelTable* t);

}  // namespace braid::kernels::cpu
