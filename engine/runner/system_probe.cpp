#include "engine/system_probe.h"

#include "kernels/cpu_info.h"
#include "kernels/gemm_peak.h"
#include "kernels/membw.h"
#include "kernels/thread_pool.h"

namespace braid {

HostCpuSummary DescribeHostCpu() {
  const kernels::CpuInfo& cpu = kernels::HostCpu();
  return {cpu.model, kernels::DescribeCpu(cpu), cpu.l3_bytes};
}

double MeasureReadBandwidth(int threads) {
  kernels::ThreadPool pool(threads < 1 ? 1 : threads);
  return kernels::MeasureReadBandwidth(pool, size_t{512} << 20, 5);
}

double MeasureStreamBandwidth(int threads, const std::vector<uint64_t>& stages) {
  kernels::ThreadPool pool(threads < 1 ? 1 : threads);
  return kernels::MeasureStreamBandwidth(pool, stages, 15);
}

double MeasureInt8GemmPeak(int threads) {
  kernels::ThreadPool pool(threads < 1 ? 1 : threads);
  return kernels::MeasureInt8DotPeak(pool, 0.2, 3);
}

CrossCoreRates MeasureCrossCoreRates(int threads) {
  if (threads < 2) return {};
  kernels::ThreadPool pool(threads);
  const kernels::CrossCoreRead r = kernels::MeasureCrossCoreRead(pool, size_t{8} << 20, 5);
  return {r.own, r.other};
}

}  // namespace braid
