// Which processor and caches this process runs on, so that every benchmark
// figure can state what it was measured on (`braid bench`, docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <string>

namespace braid::kernels {

// What the CPU and the OS report about the processor. Plain data; the sizes
// are 0 where neither source knows them.
struct CpuInfo {
  std::string model;                           // CPUID brand string, trimmed, e.g. "AMD EPYC 7571"
  std::string vendor;                          // CPUID vendor, e.g. "GenuineIntel", "AuthenticAMD"
  int family = 0, model_id = 0, stepping = 0;  // CPUID leaf 1, extended fields applied
  // Bytes of cache one core sees: its own L1 data cache and L2, and the one L3
  // instance it belongs to (not the sum over dies or sockets). From Linux sysfs
  // (what the kernel reports to this machine, which under a hypervisor may
  // differ from CPUID), else from CPUID's cache leaves.
  size_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;
  int logical_cpus = 0;      // online logical CPUs of the machine, not the affinity mask
  bool avx2 = false;         // usable: the CPU has it and the OS saves the ymm state
  bool avx512_vnni = false;  // likewise, with the zmm and opmask state
};

// The host's CpuInfo, probed once on first call (CPUID, /proc/cpuinfo, sysfs)
// and cached. Thread-safe; never fails (unknown fields stay empty or 0).
const CpuInfo& HostCpu();

// One line naming the processor, e.g.
// "AMD EPYC 7571 (family 23 model 1), L1d 32 KiB, L2 512 KiB, L3 8 MiB, 2 CPUs, avx2".
// Caches of unknown size are left out.
std::string DescribeCpu(const CpuInfo& cpu);

}  // namespace braid::kernels
