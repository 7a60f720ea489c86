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
    s[t * ldy] = ref::VecDot(T, n, w, static_cast<const char*>(x) + t * xs);
  }
}

KernelTable MakeScalar() {
  KernelTable t;
  t.isa = "scalar";
  t.dot[static_cast<int>(DType::kF32)] = ScalarDot<DType::kF32>;
  t.dot[static_cast<int>(DType::kF16)] = ScalarDot<DType::kF16>;
  t.dot[static_cast<int>(DType::kBF16)] = ScalarDot<DType::kBF16>;
  t.dot[static_cast<int>(DType::kQ4_0)] = ScalarDot<DType::kQ4_0>;
  t.dot[static_cast<int>(DType::kQ4_1)] = ScalarDot<DType::kQ4_1>;
  t.dot[static_cast<int>(DType::kQ8_0)] = ScalarDot<DType::kQ8_0>;
  t.dot[static_cast<int>(DType::kQ4_K)] = ScalarDot<DType::kQ4_K>;
  t.dot[static_cast<int>(DType::kQ6_K)] = ScalarDot<DType::kQ6_K>;
  t.rms_norm = ref::RmsNorm;
  t.swiglu = ref::SwiGlu;
  t.dot_f32 = ref::DotF32;
  t.axpy = ref::Axpy;
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

KernelTable MakeBest() {
  KernelTable t = MakeScalar();
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
  if (avx2) {
    FillAvx2VecDot(&t);
    FillAvx2Ops(&t);
  }
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni")) {
    FillAvx512VecDot(&t);
  }
#endif
  return t;
}

const KernelTable& ScalarTable() {
  static const KernelTable t = MakeScalar();
  return t;
}
const KernelTable& BestTable() {
  static const KernelTable t = MakeBest();
  return t;
}

std::atomic<bool> g_force_scalar{false};

}  // namespace

const KernelTable& Kernels() {
  return g_force_scalar.load(std::memory_order_relaxed) ? ScalarTable() : BestTable();
}

}  // namespace cpu

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  ref::DequantizeRow(type, src, dst, n);
}

DType ActivationType(DType weight_type) {
  switch (weight_type) {
    case DType::kQ4_0:
    case DType::kQ8_0: return DType::kQ8_0;
    case DType::kQ4_1: return DType::kQ8_1;
    case DType::kQ4_K:
    case DType::kQ6_K: return DType::kQ8_K;
    default: return DType::kF32;
  }
}

void QuantizeActivations(DType act_type, const float* x, void* dst, int64_t n) {
  ref::QuantizeActivations(act_type, x, dst, n);
}

float VecDot(DType weight_type, int64_t n, const void* w_row, const void* x) {
  const cpu::DotFn f = cpu::Kernels().dot[static_cast<int>(weight_type)];
  assert(f != nullptr);
  float s = 0.0f;
  f(n, w_row, x, 0, 1, &s, 0);
  return s;
}

const char* KernelIsa() { return cpu::Kernels().isa; }

bool ForceScalarKernels(bool force) { return cpu::g_force_scalar.exchange(force); }

}  // namespace braid::kernels
