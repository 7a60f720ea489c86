// Measurements of the machine used by benchmarks to put figures next to the
// limits measured in the same run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace braid {

// The processor a figure is measured on (kernels::HostCpu, probed once):
// `model` its brand string, `l3_bytes` the L3 instance one core sees (0 if
// unknown), `line` one line naming both with the family, the other caches,
// the CPU count and the SIMD extensions, e.g. "AMD EPYC 7571 (family 23
// model 1), L1d 32 KiB, L2 512 KiB, L3 8 MiB, 2 CPUs, avx2".
struct HostCpuSummary {
  std::string model, line;
  size_t l3_bytes = 0;
};
HostCpuSummary DescribeHostCpu();

// The CPU engine's thread count when none is given: the physical cores this
// process may use (its affinity mask, bounded by its cgroup's CPU quota), one
// fewer when that leaves more than 4 (docs/kernels.md, "The thread pool").
int DefaultCpuThreads();
// What that count was chosen from, e.g. "2 CPUs (2 cores)" or "16 CPUs (8 cores), quota 4".
std::string DescribeUsableCpus();

// Memory the OS can give this process now without swapping (Linux
// MemAvailable; else the free physical pages), in bytes; 0 if unknown.
uint64_t AvailableMemoryBytes();

// Streaming read bandwidth in bytes/second with `threads` threads over a
// buffer far larger than the caches (best of a few repetitions).
double MeasureReadBandwidth(int threads);

// The decode roofline's bandwidth: the weight bytes of each matmul stage of a
// decode step (ModelInfo::decode_stages) read again and again as decode reads
// them, by `threads` threads with the decode kernels' prefetches
// (kernels::MeasureStreamBandwidth): the last-level cache's bandwidth where
// they fit there, memory's otherwise. Bytes/second.
double MeasureStreamBandwidth(int threads, const std::vector<uint64_t>& stages);

// Device-to-device copy bandwidth of a GPU named as ModelOptions::device
// names it ("cuda", "cuda:N"), bytes read + written per second (a copy far
// larger than its L2, median of several); 0 for "cpu", an unknown device or
// a build without the CUDA backend.
double MeasureDeviceCopyBandwidth(const std::string& device);

// The bf16 GEMM rate of that GPU in operations/second (a multiply-add is 2),
// the best of several large products (4096 x 4096 x 8192); 0 as above.
double MeasureDeviceGemmRate(const std::string& device);

// Peak int8 dot-product rate in operations/second (a multiply-add is 2) with
// `threads` threads: a loop of vpdpbusd (AVX-512 VNNI) or maddubs (AVX2) on
// register-resident data, best of a few repetitions; 0 where neither exists.
double MeasureInt8GemmPeak(int threads);

// Read rates in bytes/second of an 8 MiB buffer that one core has just read:
// by that core again (`own`) and by another (`other`); zeros below 2 threads
// (kernels::MeasureCrossCoreRead). `other` far below `own` means the cores do
// not share a last-level cache.
struct CrossCoreRates {
  double own = 0.0, other = 0.0;
};
CrossCoreRates MeasureCrossCoreRates(int threads);

}  // namespace braid
