// Quantized rows: dequantization (the scalar reference is the source of truth,
// checked against the `gguf` Python package), activation quantization, and dot
// products between a weight row and a quantized activation row.
//
// The fast path never dequantizes a weight matrix: activations are quantized to
// a partner type of the weight type and the dot product runs on integers. Two
// precisions exist (docs/kernels.md):
//   kInt8:    Q8_0, Q8_1 or Q8_K, as llama.cpp does (8-bit activations);
//   kSplit16: Q16_0, Q16_1 or Q16_K, ~15-bit activations q16 = 128 hi + lo,
//             dotted as 128 (w . hi) + (w . lo) with the same int8 instructions.
// Dispatch picks AVX-512 VNNI, AVX2 or scalar code at run time from what the CPU
// reports.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace braid::kernels {

enum class ActPrecision { kInt8, kSplit16 };

// dst[0..n) = the values stored in `src` (n a multiple of the block size).
void DequantizeRow(DType type, const void* src, float* dst, int64_t n);

// Rewrites n_elements of Q5_0 at `src` as Q8_0 at `dst` (n_elements / 32 blocks
// of 34 bytes; n_elements a multiple of 32; the buffers must not overlap): each
// block keeps its fp16 d and its values q - 16 (q in 0..31) become the int8
// quants. Lossless: DequantizeRow(kQ8_0, dst) equals DequantizeRow(kQ5_0, src)
// bit for bit, so Q5_0 weights run on the Q8_0 kernels (at 34/22 the bytes).
void RepackQ5_0AsQ8_0(const void* src, void* dst, int64_t n_elements);

// The activation type whose dot product with `weight_type` is implemented:
//   kInt8:    Q4_0, Q8_0 -> Q8_0;  Q4_1 -> Q8_1;  Q4_K, Q6_K -> Q8_K;
//   kSplit16: Q4_0, Q8_0 -> Q16_0; Q4_1 -> Q16_1; Q4_K, Q6_K -> Q16_K;
//   F32, F16, BF16 -> F32 at either precision.
DType ActivationType(DType weight_type, ActPrecision precision);
// The kInt8 partner (ActivationType(weight_type, ActPrecision::kInt8)).
DType ActivationType(DType weight_type);

// Quantizes x[0..n) into `dst` in `act_type` layout (an ActivationType result).
// For kF32 it copies. n must be a multiple of the activation block size.
void QuantizeActivations(DType act_type, const float* x, void* dst, int64_t n);

// dot(w_row, x) over n elements: `w_row` in `weight_type` layout, `x` quantized
// with QuantizeActivations(act_type, ...), where act_type must be
// ActivationType(weight_type, p) for some precision p.
float VecDot(DType weight_type, DType act_type, int64_t n, const void* w_row, const void* x);

// Which implementation VecDot and the matmuls use ("avx512vnni", "avx2", "scalar").
const char* KernelIsa();
// Forces the scalar code (tests compare both); returns the previous setting.
bool ForceScalarKernels(bool force);

}  // namespace braid::kernels
