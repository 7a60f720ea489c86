#include "kernels/cpu_cores.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "cpu/cpu_info_detail.h"

#if defined(__linux__)
#include <sched.h>
#endif

namespace braid::kernels {
namespace detail {

namespace {

bool ParseNumber(std::string_view s, double* out) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  if (s.empty()) return false;
  const std::string str(s);
  char* end = nullptr;
  const double v = std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

}  // namespace

double ParseCpuMax(std::string_view text) {
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) return 0.0;
  double quota = 0, period = 0;
  if (!ParseNumber(text.substr(0, space), &quota)) return 0.0;  // "max" or garbage: no limit
  if (!ParseNumber(text.substr(space + 1), &period) || quota <= 0 || period <= 0) return 0.0;
  return quota / period;
}

double ParseCfsQuota(std::string_view quota_us, std::string_view period_us) {
  double quota = 0, period = 0;
  if (!ParseNumber(quota_us, &quota) || !ParseNumber(period_us, &period)) return 0.0;
  if (quota <= 0 || period <= 0) return 0.0;
  return quota / period;
}

std::string CgroupPath(std::string_view proc_self_cgroup, bool v2) {
  std::istringstream in{std::string(proc_self_cgroup)};
  std::string line;
  while (std::getline(in, line)) {
    // hierarchy-ID:controller-list:path
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    if (v2) {
      if (id == "0" && controllers.empty()) return line.substr(b + 1);
      continue;
    }
    std::istringstream list(controllers);
    std::string c;
    while (std::getline(list, c, ','))
      if (c == "cpu") return line.substr(b + 1);
  }
  return "";
}

}  // namespace detail

namespace {

using detail::ReadText;

// The smallest limit on the path from the cgroup up to the root: a parent's
// limit bounds every child.
double CgroupQuota() {
  std::string self;
  if (!ReadText("/proc/self/cgroup", &self)) return 0.0;
  double best = 0.0;
  auto take = [&](double q) {
    if (q > 0 && (best == 0 || q < best)) best = q;
  };
  auto walk = [&](const std::string& root, std::string path, auto&& read_limit) {
    for (;;) {
      take(read_limit(root + path));
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  };
  const std::string v2 = detail::CgroupPath(self, true);
  if (!v2.empty()) {
    walk("/sys/fs/cgroup", v2, [](const std::string& dir) {
      std::string text;
      return ReadText(dir + "/cpu.max", &text) ? detail::ParseCpuMax(text) : 0.0;
    });
  }
  const std::string v1 = detail::CgroupPath(self, false);
  if (!v1.empty()) {
    for (const char* root : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
      walk(root, v1, [](const std::string& dir) {
        std::string q, p;
        return ReadText(dir + "/cpu.cfs_quota_us", &q) && ReadText(dir + "/cpu.cfs_period_us", &p)
                   ? detail::ParseCfsQuota(q, p)
                   : 0.0;
      });
    }
  }
  return best;
}

}  // namespace

UsableCpus ProbeUsableCpus() {
  UsableCpus u;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    u.affinity = CPU_COUNT(&set);
    // A core is its (package, core id) pair; CPUs whose topology is
    // unreadable count as cores of their own.
    std::set<std::pair<long, long>> cores;
    int unknown = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      std::string pkg, core;
      if (ReadText(dir + "physical_package_id", &pkg) && ReadText(dir + "core_id", &core))
        cores.emplace(std::atol(pkg.c_str()), std::atol(core.c_str()));
      else
        ++unknown;
    }
    u.cores = static_cast<int>(cores.size()) + unknown;
  }
  u.quota = CgroupQuota();
#endif
  if (u.affinity == 0) u.affinity = static_cast<int>(std::thread::hardware_concurrency());
  return u;
}

int DefaultThreads(const UsableCpus& cpus) {
  int n = cpus.cores > 0 ? cpus.cores : cpus.affinity;
  if (cpus.quota > 0) n = std::min(n, static_cast<int>(std::ceil(cpus.quota - 1e-9)));
  n = std::max(1, n);
  return n > 4 ? n - 1 : n;
}

int DefaultThreadCount() {
  static const int n = DefaultThreads(ProbeUsableCpus());
  return n;
}

std::string DescribeUsableCpus(const UsableCpus& cpus) {
  char buf[96];
  int len = std::snprintf(buf, sizeof buf, "%d CPUs (%d cores)", cpus.affinity, cpus.cores);
  if (cpus.quota > 0) std::snprintf(buf + len, sizeof buf - len, ", quota %.2g", cpus.quota);
  return buf;
}

}  // namespace braid::kernels
