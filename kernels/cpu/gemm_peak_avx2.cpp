// The maddubs loop of MeasureInt8DotPeak on AVX2 CPUs (ggml's int8 idiom:
// maddubs + madd + add per 32 multiply-adds), in assembly so that the 8
// accumulators stay in registers (see gemm_peak_avx512.cpp).
#include <cstdint>

namespace braid::kernels::cpu {

int64_t Int8DotLoopAvx2(int64_t iters, int32_t* sink) {
  if (iters <= 0) return 0;
  int64_t n = iters;
  int32_t out = 0;
#define BRAID_MADD_STEP(acc)               \
  "vpmaddubsw %%ymm9, %%ymm8, %%ymm11\n\t" \
  "vpmaddwd %%ymm10, %%ymm11, %%ymm11\n\t" \
  "vpaddd %%ymm11, %%" acc ", %%" acc "\n\t"
  __asm__ volatile(
      "vpcmpeqd %%ymm8, %%ymm8, %%ymm8\n\t"  // bytes 0xff
      "vpabsb %%ymm8, %%ymm9\n\t"             // bytes 1
      "vpabsw %%ymm8, %%ymm10\n\t"            // words 1
      "vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
      "vmovdqa %%ymm0, %%ymm1\n\t"
      "vmovdqa %%ymm0, %%ymm2\n\t"
      "vmovdqa %%ymm0, %%ymm3\n\t"
      "vmovdqa %%ymm0, %%ymm4\n\t"
      "vmovdqa %%ymm0, %%ymm5\n\t"
      "vmovdqa %%ymm0, %%ymm6\n\t"
      "vmovdqa %%ymm0, %%ymm7\n\t"
      "1:\n\t"
      BRAID_MADD_STEP("ymm0") BRAID_MADD_STEP("ymm1") BRAID_MADD_STEP("ymm2") BRAID_MADD_STEP("ymm3")
      BRAID_MADD_STEP("ymm4") BRAID_MADD_STEP("ymm5") BRAID_MADD_STEP("ymm6") BRAID_MADD_STEP("ymm7")
      "dec %0\n\t"
      "jnz 1b\n\t"
      "vpaddd %%ymm7, %%ymm0, %%ymm0\n\t"
      "vmovd %%xmm0, %1\n\t"
      "vzeroupper\n\t"
      : "+r"(n), "=r"(out)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "cc");
#undef BRAID_MADD_STEP
  *sink = out;
  return iters * 8 * 32;
}

}  // namespace braid::kernels::cpu
