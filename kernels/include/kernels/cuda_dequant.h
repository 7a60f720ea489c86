// Dequantization of GGUF weight rows on a CUDA device: the first CUDA
// kernels, the seed of the CUDA backend. Pure compute: the caller owns the
// device buffers and the stream. Errors come back as cudaError_t values
// (converted to int so that CUDA headers stay out of this one).
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace braid::kernels::cuda {

// dst[0..n) = the values of `src` (device pointers; n a multiple of the block
// size) for F32, F16, BF16, Q4_0, Q4_1 and Q8_0. Returns 0 (cudaSuccess) or
// the CUDA error code; an unsupported type returns -1 without launching.
int DequantizeRow(DType type, const void* src, float* dst, int64_t n, void* stream);

}  // namespace braid::kernels::cuda
