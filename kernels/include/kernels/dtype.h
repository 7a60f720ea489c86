// Element types of weight tensors, with GGUF's numeric ids, and the block
// layout of each (elements per block, bytes per block). Facts follow ggml's
// ggml-common.h; see docs/formats.md. Ids from kFirstInternalTypeId on are
// Braid's own (activation formats, and FP8 as checkpoints store it): they
// never appear in a GGUF file.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::kernels {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,  // no dot kernels of its own: RepackQ5_0AsQ8_0 (quant.h) makes it Q8_0, exactly
  kQ8_0 = 8,
  kQ8_1 = 9,  // activation type only (the Q4_1 dot product partner)
  kQ4_K = 12,
  kQ6_K = 14,
  kQ8_K = 15,  // activation type only (the K-quant dot product partner)
  kBF16 = 30,
  // "Split 16-bit" activation types (Braid-internal, docs/kernels.md): per block
  // q16 = round(x / d), |q16| <= 16256, stored as q16 = 128 * hi + lo with hi and
  // lo int8, so the int8 dot-product instructions give ~15-bit activations.
  kQ16_0 = 1000,  // activation type only (partner of Q4_0 and Q8_0)
  kQ16_1 = 1001,  // activation type only (partner of Q4_1)
  kQ16_K = 1002,  // activation type only (partner of Q4_K and Q6_K)
  // FP8 e4m3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no
  // infinities, 0x7f and 0xff NaN), as a safetensors checkpoint stores it
  // (F8_E4M3) before the loader dequantizes it with its scales.
  kF8_E4M3 = 1010,
};

// Type ids from here on are Braid-internal (no file format may use them).
inline constexpr uint32_t kFirstInternalTypeId = 1000;

struct DTypeInfo {
  const char* name;  // "q4_1"
  int block_elems;   // elements per block (1 for plain floats)
  int block_bytes;   // bytes per block
};

// Info for a GGUF type id or a Braid-internal activation type id, or nullptr
// when Braid does not support that id. Readers of weight files must also
// refuse IsActivationOnly types.
const DTypeInfo* GetDTypeInfo(uint32_t type_id);

// True for the types that only hold quantized activations (Q8_1, Q8_K and the
// internal Q16_*): a weight tensor of such a type is malformed input.
bool IsActivationOnly(uint32_t type_id);
inline bool IsActivationOnly(DType t) { return IsActivationOnly(static_cast<uint32_t>(t)); }
inline const DTypeInfo& Info(DType t) { return *GetDTypeInfo(static_cast<uint32_t>(t)); }

// Bytes taken by n elements (n must be a multiple of the block size).
inline size_t RowBytes(DType t, int64_t n) {
  const DTypeInfo& i = Info(t);
  return static_cast<size_t>(n / i.block_elems) * static_cast<size_t>(i.block_bytes);
}

// IEEE half and bfloat16 conversions (round to nearest even on the way down).
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);
inline float Bf16ToFp32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t Fp32ToBf16(float f);
// e4m3 -> float, exact (subnormals included; NaN for 0x7f and 0xff).
float Fp8E4M3ToFp32(uint8_t b);

}  // namespace braid::kernels
