// The constants of the vector exp used by SwiGLU (Cephes expf): x is clamped
// to [kMin, kMax], x = n ln2 + r with ln2 in two parts (kLn2Hi + kLn2Lo, so
// that r is exact), exp(r) = 1 + r + r^2 (kP0 + kP1 r + ... + kP5 r^5), and
// the result scaled by 2^n. ~2 ulp; below kMin exp(x) < 1.2e-38, which silu
// does not see. Written once here for every vector width.
#pragma once

namespace braid::kernels::cpu::exp_cephes {

inline constexpr float kMin = -87.3f, kMax = 88.3f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kP5 = 1.9875691500e-4f, kP4 = 1.3981999507e-3f, kP3 = 8.3334519073e-3f,
                       kP2 = 4.1665795894e-2f, kP1 = 1.6666665459e-1f, kP0 = 5.0000001201e-1f;

}  // namespace braid::kernels::cpu::exp_cephes
