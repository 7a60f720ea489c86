// Runtime dispatch: the kernel table is chosen once, at first use, from what
// the CPU reports (__builtin_cpu_supports), and cached; the public entry points
// of quant.h go through it.
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <atomic>
#include <cassert>

#include "cpu/kernel_table.h"
#include "kernels/quant.h"
#include "ref/ref.h"

namespace braid::kernels {
namespace cpu {
namespace {

template <DType T>
void ScalarDot(int64_t n, const void* w, const void* x, size_t xs, int nx, float* s, int64_t ldy) {
  for (int t = 0; t < nx; ++t) {
    s[t * ldy] = ref::VecDot(T, ActivationType(T, ActPrecision::kInt8), n, w,
                             static_cast<const char*>(x) + t * xs);
  }
}

template <DType T>
void ScalarDot16(int64_t n, const void* w, const void* x, size_t xs, int nx, float* s,
                 int64_t ldy) {
  for (int t = 0; t < nx; ++t) {
    s[t * ldy] = ref::VecDot(T, ActivationType(T, ActPrecision::kSplit16), n, w,
                             static_cast<const char*>(x) + t * xs);
  }
}

KernelTable MakeScalar() {
  KernelTable t;
  t.isa = "scalar";
  auto set = [&](DType w, DotFn int8, DotFn split16) {
    t.dot[0][static_cast<int>(w)] = int8;
    t.dot[1][static_cast<int>(w)] = split16;
  };
  set(DType::kF32, ScalarDot<DType::kF32>, nullptr);
  set(DType::kF16, ScalarDot<DType::kF16>, nullptr);
  set(DType::kBF16, ScalarDot<DType::kBF16>, nullptr);
  set(DType::kQ4_0, ScalarDot<DType::kQ4_0>, ScalarDot16<DType::kQ4_0>);
  set(DType::kQ4_1, ScalarDot<DType::kQ4_1>, ScalarDot16<DType::kQ4_1>);
  set(DType::kQ8_0, ScalarDot<DType::kQ8_0>, ScalarDot16<DType::kQ8_0>);
  set(DType::kQ4_K, ScalarDot<DType::kQ4_K>, ScalarDot16<DType::kQ4_K>);
  set(DType::kQ6_K, ScalarDot<DType::kQ6_K>, ScalarDot16<DType::kQ6_K>);
  t.quantize16[0] = ref::QuantizeRowQ16_0;
  t.quantize16[1] = ref::QuantizeRowQ16_1;
  t.quantize16[2] = ref::QuantizeRowQ16_K;
  t.quantize8[0] = ref::QuantizeRowQ8_0;
  t.quantize8[1] = ref::QuantizeRowQ8_1;
  t.rms_norm = ref::RmsNorm;
  t.swiglu = ref::SwiGlu;
  t.rope_apply = ref::RopeApply;
  t.dot_f32 = ref::DotF32;
  t.axpy = ref::Axpy;
  t.argmax = ref::Argmax;
  t.attend = ref::AttendPaged;
  t.store_row_q8 = ref::StoreRowQ8;
  return t;
}

// F16C is CPUID leaf 1, ECX bit 29 (clang has no "f16c" for __builtin_cpu_supports).
bool HasF16c() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c >> 29) & 1u;
#else
  return false;
#endif
}

bool HasAvx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
#else
  return false;
#endif
}

KernelTable MakeAvx2() {
  KernelTable t = MakeScalar();
  if (HasAvx2()) {
    FillAvx2VecDot(&t);
    FillAvx2Ops(&t);
    FillAvx2Quantize(&t);
    FillAvx2Attention(&t);
    FillAvx2Gemm16(&t);
  }
  return t;
}

KernelTable MakeBest() {
  KernelTable t = MakeAvx2();
#if defined(__x86_64__)
  if (HasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni")) {
    FillAvx512VecDot(&t);
    FillAvx512Decode16(&t);
    FillAvx512Decode8(&t);
    FillAvx512Gemm16(&t);
    FillAvx512Quantize(&t);
    FillAvx512Ops(&t);
    FillAvx512Attention(&t);
  }
#endif
  return t;
}

const KernelTable& ScalarTable() {
  static const KernelTable t = MakeScalar();
  return t;
}
const KernelTable& Avx2Table() {
  static const KernelTable t = MakeAvx2();
  return t;
}
const KernelTable& BestTable() {
  static const KernelTable t = MakeBest();
  return t;
}

std::atomic<bool> g_force_scalar{false};
std::atomic<bool> g_force_avx2{false};

}  // namespace

const KernelTable& Kernels() {
  if (g_force_scalar.load(std::memory_order_relaxed)) return ScalarTable();
  if (g_force_avx2.load(std::memory_order_relaxed)) return Avx2Table();
  return BestTable();
}

bool ForceAvx2Kernels(bool force) {
  if (!HasAvx2()) return false;
  g_force_avx2.store(force);
  return true;
}

}  // namespace cpu

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  ref::DequantizeRow(type, src, dst, n);
}

DType ActivationType(DType weight_type, ActPrecision precision) {
  const bool split = precision == ActPrecision::kSplit16;
  switch (weight_type) {
    case DType::kQ4_0:
    case DType::kQ8_0:
      return split ? DType::kQ16_0 : DType::kQ8_0;
    case DType::kQ4_1:
      return split ? DType::kQ16_1 : DType::kQ8_1;
    case DType::kQ4_K:
    case DType::kQ6_K:
      return split ? DType::kQ16_K : DType::kQ8_K;
    default:
      return DType::kF32;
  }
}

DType ActivationType(DType weight_type) { return ActivationType(weight_type, ActPrecision::kInt8); }

void QuantizeActivations(DType act_type, const float* x, void* dst, int64_t n) {
  const cpu::KernelTable& k = cpu::Kernels();
  switch (act_type) {
    case DType::kQ16_0:
      return k.quantize16[0](x, dst, n);
    case DType::kQ16_1:
      return k.quantize16[1](x, dst, n);
    case DType::kQ16_K:
      return k.quantize16[2](x, dst, n);
    case DType::kQ8_0:
      return k.quantize8[0](x, dst, n);
    case DType::kQ8_1:
      return k.quantize8[1](x, dst, n);
    default:
      return ref::QuantizeActivations(act_type, x, dst, n);
  }
}

float VecDot(DType weight_type, DType act_type, int64_t n, const void* w_row, const void* x) {
  assert(act_type == ActivationType(weight_type, cpu::IsSplit16(act_type) ? ActPrecision::kSplit16
                                                                          : ActPrecision::kInt8));
  const cpu::DotFn f = cpu::FindDot(cpu::Kernels(), weight_type, act_type);
  assert(f != nullptr);
  float s = 0.0f;
  f(n, w_row, x, 0, 1, &s, 0);
  return s;
}

const char* KernelIsa() { return cpu::Kernels().isa; }

bool ForceScalarKernels(bool force) { return cpu::g_force_scalar.exchange(force); }

}  // namespace braid::kernels
