// Type table and fp16/bf16 conversions (bit-exact, no F16C needed).
#include "kernels/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace braid::kernels {
namespace {

float FromBits(uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
uint32_t ToBits(float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  return w;
}

struct Entry {
  uint32_t id;
  DTypeInfo info;
};

// Block sizes from ggml-common.h (QK4_0 = QK4_1 = QK5_0 = QK8_0 = QK8_1 = 32, QK_K = 256).
constexpr Entry kTypes[] = {
    {0, {"f32", 1, 4}},
    {1, {"f16", 1, 2}},
    {2, {"q4_0", 32, 18}},
    {3, {"q4_1", 32, 20}},
    {6, {"q5_0", 32, 22}},
    {8, {"q8_0", 32, 34}},
    {9, {"q8_1", 32, 36}},
    {12, {"q4_K", 256, 144}},
    {14, {"q6_K", 256, 210}},
    {15, {"q8_K", 256, 292}},
    {30, {"bf16", 1, 2}},
    // Braid-internal split 16-bit activations (blocks.h): fp32 d, int8 hi[], int8 lo[],
    // plus the int32 sum (Q16_1) or the 16 int32 group sums (Q16_K).
    {1000, {"q16_0", 32, 68}},
    {1001, {"q16_1", 32, 72}},
    {1002, {"q16_K", 256, 580}},
    {1010, {"f8_e4m3", 1, 1}},
};

}  // namespace

const DTypeInfo* GetDTypeInfo(uint32_t type_id) {
  for (const Entry& e : kTypes) {
    if (e.id == type_id) return &e.info;
  }
  return nullptr;
}

bool IsActivationOnly(uint32_t type_id) {
  return type_id == static_cast<uint32_t>(DType::kQ8_1) ||
         type_id == static_cast<uint32_t>(DType::kQ8_K) || type_id >= kFirstInternalTypeId;
}

// Half -> float: exact for every input (normals, subnormals, inf, NaN), after
// Maratyszcza's FP16 library: scale the shifted bits by 2^-112 for normals, and
// rebuild subnormals as (0.5 + m * 2^-24 ...) - 0.5 through a magic bias.
float Fp16ToFp32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = FromBits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = FromBits((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result = sign | (two_w < (1u << 27) ? ToBits(denormalized) : ToBits(normalized));
  return FromBits(result);
}

// Float -> half, round to nearest even, overflow to inf, NaN kept (quiet).
// Adding a power of two `bias` aligned to the half's ulp makes the FPU do the rounding.
uint16_t Fp32ToFp16(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = ToBits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = FromBits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = ToBits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// Float -> bfloat16, round to nearest even; NaN forced quiet (as ggml_compute_fp32_to_bf16).
uint16_t Fp32ToBf16(float f) {
  uint32_t u = ToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);
  u = (u + (0x7fffu + ((u >> 16) & 1u))) >> 16;
  return static_cast<uint16_t>(u);
}

float Fp8E4M3ToFp32(uint8_t b) {
  const int exp = (b >> 3) & 15, man = b & 7;
  if (exp == 15 && man == 7) return std::numeric_limits<float>::quiet_NaN();
  // Subnormals (exp 0): man / 8 * 2^-6; normals: (1 + man / 8) * 2^(exp - 7).
  const float v = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                           : std::ldexp(static_cast<float>(8 + man), exp - 10);
  return (b & 0x80) ? -v : v;
}

}  // namespace braid::kernels
