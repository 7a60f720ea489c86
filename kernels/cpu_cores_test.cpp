// The default thread count from what the machine grants: cgroup limits parsed
// as the kernel writes them, and the policy over cores, quota and size.
#include "kernels/cpu_cores.h"

#include <doctest/doctest.h>

namespace braid::kernels {
namespace {

TEST_CASE("cpu.max and cfs quota parse to CPUs, no limit to 0") {
  CHECK(detail::ParseCpuMax("max 100000\n") == 0.0);
  CHECK(detail::ParseCpuMax("150000 100000\n") == doctest::Approx(1.5));
  CHECK(detail::ParseCpuMax("200000 100000") == doctest::Approx(2.0));
  CHECK(detail::ParseCpuMax("") == 0.0);
  CHECK(detail::ParseCpuMax("garbage") == 0.0);
  CHECK(detail::ParseCpuMax("0 100000") == 0.0);
  CHECK(detail::ParseCfsQuota("-1\n", "100000\n") == 0.0);
  CHECK(detail::ParseCfsQuota("50000\n", "100000\n") == doctest::Approx(0.5));
  CHECK(detail::ParseCfsQuota("x", "100000") == 0.0);
}

TEST_CASE("CgroupPath finds the v2 entry and the v1 cpu controller") {
  const char* mixed = "4:memory:/m\n3:cpu,cpuacct:/docker/abc\n0::/user.slice/app\n";
  CHECK(detail::CgroupPath(mixed, true) == "/user.slice/app");
  CHECK(detail::CgroupPath(mixed, false) == "/docker/abc");
  CHECK(detail::CgroupPath("2:cpuacct:/x\n1:cpu:/y\n", false) == "/y");
  CHECK(detail::CgroupPath("1:cpuacct:/x\n", false).empty());
  CHECK(detail::CgroupPath("", true).empty());
}

TEST_CASE("DefaultThreads: cores, bounded by the quota, one left on larger machines") {
  CHECK(DefaultThreads({.affinity = 2, .cores = 2}) == 2);
  CHECK(DefaultThreads({.affinity = 8, .cores = 4}) == 4);     // SMT pairs count once
  CHECK(DefaultThreads({.affinity = 16, .cores = 16}) == 15);  // room for the other threads
  CHECK(DefaultThreads({.affinity = 16, .cores = 16, .quota = 1.5}) == 2);
  CHECK(DefaultThreads({.affinity = 16, .cores = 16, .quota = 0.5}) == 1);
  CHECK(DefaultThreads({.affinity = 3, .cores = 0}) == 3);  // topology unknown: logical CPUs
  CHECK(DefaultThreads({}) == 1);
}

TEST_CASE("ProbeUsableCpus sees at least one CPU, cores no more than CPUs") {
  const UsableCpus u = ProbeUsableCpus();
  CHECK(u.affinity >= 1);
  CHECK(u.cores <= u.affinity);
  CHECK(u.quota >= 0.0);
  CHECK(DefaultThreadCount() >= 1);
  CHECK(DefaultThreadCount() <= u.affinity);
}

}  // namespace
}  // namespace braid::kernels
