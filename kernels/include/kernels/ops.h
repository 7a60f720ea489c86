// Elementwise and small ops of a transformer layer, fp32, pure functions.
// Scalar references live in kernels/ref/; these are the dispatched entry points.
#pragma once

#include <cstdint>

namespace braid::kernels {

// y = x / sqrt(mean(x^2) + eps) * w          x, y, w: [n]   (y may alias x)
void RmsNorm(const float* x, const float* w, float eps, int64_t n, float* y);

// Rotary embedding of one head vector x[head_dim] at position `pos`, in place.
// Adjacent pairs (x[2i], x[2i+1]) for llama GGUF files ("norm" mode), or split
// halves (x[i], x[i + n_rot/2]) for HF checkpoints and qwen2 ("neox" mode).
// `inv_freq[i]` = base^(-2i/n_rot) with any frequency scaling already applied.
void Rope(float* x, int n_rot, int64_t pos, const float* inv_freq, bool neox);
// Rope in two halves, bit for bit the same: the angles' cosines and sines of
// one position (n_rot / 2 each), computed once for every head of a token, then
// the rotation of one head vector with them.
void RopeCosSin(int n_rot, int64_t pos, const float* inv_freq, float* cos, float* sin);
void RopeApply(float* x, int n_rot, const float* cos, const float* sin, bool neox);

// x = softmax(x) over n, in place (max-subtracted).
void Softmax(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i]                     all: [n]
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// out[i] = gelu(gate[i]) * up[i], with GELU's tanh approximation
//   gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))        all: [n]
void GeGluTanh(const float* gate, const float* up, int64_t n, float* out);

// dot of two fp32 vectors.
float DotF32(const float* a, const float* b, int64_t n);
// y += a * x
void Axpy(float a, const float* x, int64_t n, float* y);

// The first index of the largest value of x[0..n) that is not NaN (0 if all are).
int64_t Argmax(const float* x, int64_t n);

}  // namespace braid::kernels
