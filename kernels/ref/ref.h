// Scalar reference kernels: the source of truth that every SIMD version is
// tested against. Plain C++, no intrinsics. Internal to kernels/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/dtype.h"

namespace braid::kernels::ref {

// dst[0..n) = values of the row `src` of `type` (any weight or activation type).
void DequantizeRow(DType type, const void* src, float* dst, int64_t n);

// Activation quantization, as ggml's quantize_row_*_ref: per block
// d = amax / 127, q = round(x / d) (ties away from zero).   x: [n] -> dst: n/block blocks
void QuantizeRowQ8_0(const float* x, void* dst, int64_t n);
void QuantizeRowQ8_1(const float* x, void* dst, int64_t n);
void QuantizeRowQ8_K(const float* x, void* dst, int64_t n);
// Split 16-bit (blocks.h): d = amax / 16256, q16 = round(x / d) (ties to even),
// hi = floor((q16 + 64) / 128), lo = q16 - 128 hi; plus the exact q16 sums.
void QuantizeRowQ16_0(const float* x, void* dst, int64_t n);
void QuantizeRowQ16_1(const float* x, void* dst, int64_t n);
void QuantizeRowQ16_K(const float* x, void* dst, int64_t n);
// Dispatches on act_type (kF32 copies).
void QuantizeActivations(DType act_type, const float* x, void* dst, int64_t n);

// Weight quantization (for tests and benchmarks; not ggml's importance-weighted K-quant
// search, just a plain min/max fit): x: [n] -> dst in `type` layout.
void QuantizeWeights(DType type, const float* x, void* dst, int64_t n);

// dot(w_row, x): w_row in `weight_type`, x in `act_type` layout, which must be
// ActivationType(weight_type, p) for some precision p (the Q16_* types select the
// split 16-bit dots; the others the int8 / fp32 ones).
float VecDot(DType weight_type, DType act_type, int64_t n, const void* w_row, const void* x);

// The interleaved weight layout of kernels/matmul.h (16-row groups; layout in
// interleave_ref.cpp), for Q4_1 and Q8_0 weights.
bool Interleavable(DType type);
size_t InterleavedGroupBytes(DType type, int64_t cols);  // bytes per 16-row group
// rows x cols of `type` (rows row_bytes apart) -> ceil(rows / 16) groups at dst.
void Interleave(DType type, const void* src, size_t row_bytes, int64_t rows, int64_t cols,
                void* dst);
// y[t * ldy + r] for r in [r0, r1), t < n_tokens, from an interleaved matrix and
// quantized activation rows (ActivationType(type, p)) xq_row_bytes apart.
void MatMulInterleaved(DType type, const void* w, int64_t cols, DType act, const void* xq,
                       size_t xq_row_bytes, int n_tokens, int64_t r0, int64_t r1, float* y,
                       int64_t ldy);

// Ops (see kernels/ops.h for the math).
void RmsNorm(const float* x, const float* w, float eps, int64_t n, float* y);
void Rope(float* x, int n_rot, int64_t pos, const float* inv_freq, bool neox);
void RopeCosSin(int n_rot, int64_t pos, const float* inv_freq, float* cos, float* sin);
void RopeApply(float* x, int n_rot, const float* cos, const float* sin, bool neox);
void Softmax(float* x, int64_t n);
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);
void GeGluTanh(const float* gate, const float* up, int64_t n, float* out);
float DotF32(const float* a, const float* b, int64_t n);
void Axpy(float a, const float* x, int64_t n, float* y);
int64_t Argmax(const float* x, int64_t n);
// kernels/attention.h: scores as fp64 dots, Softmax as above, out summed in
// position order in fp32.
// Over a kQ8 cache, the integer form that attention.h defines.
void AttendPaged(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head, int len,
                 float scale, float* scratch, float* out);
// The same over positions [first, len).
void AttendPagedFrom(const float* q, int n_q, int head_dim, const PagedKv& kv, int kv_head,
                     int first, int len, float scale, float* scratch, float* out);
// A query head for kQ8 attention: qi = round(q / qs) with qs = amax / 127
// (returned; clamped to [-127, 127], NaN as -127, as StoreRowQ8 stores K and
// V), and *sum = sum of qi.
float QuantizeQuery(const float* q, int head_dim, int8_t* qi, int32_t* sum);
float StoreRowQ8(const float* x, int head_dim, int block_size, int slot, bool value, uint8_t* tile);
// kQ8 attention's integer runs: at most this many positions per int32 sum.
inline constexpr int kQ8AttentionRun = 65536;

}  // namespace braid::kernels::ref
