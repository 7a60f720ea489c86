// How many CPUs this process may really use, and the CPU engine's default
// thread count from that (docs/kernels.md, "The thread pool").
#pragma once

#include <string>
#include <string_view>

namespace braid::kernels {

struct UsableCpus {
  int affinity = 0;    // logical CPUs in this process's affinity mask (0 if unknown)
  int cores = 0;       // physical cores among them, SMT siblings counted once (0 if unknown)
  double quota = 0.0;  // the cgroup's CPU bandwidth limit in CPUs, e.g. 1.5 (0 = none)
};

// Probes the affinity mask (sched_getaffinity), the cores' topology (sysfs)
// and the CPU limit of this process's cgroup and its ancestors (cgroup v2
// cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us). Never fails: what cannot
// be read stays 0.
UsableCpus ProbeUsableCpus();

// The default worker count for a machine with `cpus`: its physical cores
// (else its logical CPUs, else 1), no more than the quota rounded up, and one
// fewer when that leaves more than 4.
int DefaultThreads(const UsableCpus& cpus);

// DefaultThreads(ProbeUsableCpus()), probed once.
int DefaultThreadCount();

// "N CPUs (M cores), quota Q" for benchmark headers.
std::string DescribeUsableCpus(const UsableCpus& cpus);

namespace detail {
// cgroup v2 cpu.max ("max 100000" or "150000 100000") in CPUs; 0 = no limit or unreadable.
double ParseCpuMax(std::string_view text);
// v1: cpu.cfs_quota_us ("-1" = none) over cpu.cfs_period_us; 0 = none.
double ParseCfsQuota(std::string_view quota_us, std::string_view period_us);
// The cgroup path of /proc/self/cgroup for v2 ("0::/a/b") or for the v1
// hierarchy holding the cpu controller; empty if absent.
std::string CgroupPath(std::string_view proc_self_cgroup, bool v2);
}  // namespace detail

}  // namespace braid::kernels
