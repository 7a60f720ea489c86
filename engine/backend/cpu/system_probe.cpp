#include "engine/system_probe.h"

#include <unistd.h>

#include <cstdio>

#include "kernels/cpu_cores.h"
#include "kernels/cpu_info.h"
#include "kernels/gemm_peak.h"
#include "kernels/membw.h"
#include "kernels/thread_pool.h"

namespace braid {

HostCpuSummary DescribeHostCpu() {
  const kernels::CpuInfo& cpu = kernels::HostCpu();
  return {cpu.model, kernels::DescribeCpu(cpu), cpu.l3_bytes};
}

int DefaultCpuThreads() { return kernels::DefaultThreadCount(); }

std::string DescribeUsableCpus() { return kernels::DescribeUsableCpus(kernels::ProbeUsableCpus()); }

uint64_t AvailableMemoryBytes() {
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f))
      found = std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    std::fclose(f);
    if (found) return static_cast<uint64_t>(kb) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
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
