// The CPU probe: its parsers on fixed text and fake sysfs trees, and the
// host's probe against what the compiler runtime and /proc/cpuinfo say.
#include "kernels/cpu_info.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cpu/cpu_info_detail.h"

namespace braid::kernels {
namespace {

namespace fs = std::filesystem;

TEST_CASE("cpu_info: sysfs cache sizes parse to bytes") {
  CHECK(detail::ParseCacheSize("32K") == 32768);
  CHECK(detail::ParseCacheSize("8192K") == 8388608);
  CHECK(detail::ParseCacheSize("1M") == 1048576);
  CHECK(detail::ParseCacheSize("512K\n") == 524288);  // as read from the file
  CHECK(detail::ParseCacheSize("2G") == (size_t{2} << 30));
  CHECK(detail::ParseCacheSize("768") == 768);
  CHECK(detail::ParseCacheSize("") == 0);
  CHECK(detail::ParseCacheSize("K") == 0);
  CHECK(detail::ParseCacheSize("32KB") == 0);
  CHECK(detail::ParseCacheSize("32X") == 0);
  CHECK(detail::ParseCacheSize("-32K") == 0);
  CHECK(detail::ParseCacheSize("99999999999999999999") == 0);  // past 2^64
  CHECK(detail::ParseCacheSize("18014398509481984K") == 0);    // 2^54 Ki = 2^64
}

TEST_CASE("cpu_info: family and model from CPUID leaf 1 EAX") {
  // EPYC 7571 (Zen 1, as /proc/cpuinfo of such a host shows it): family 0xF +
  // extended 0x8, model 1, stepping 2.
  detail::Signature s = detail::DecodeSignature(0x00800F12);
  CHECK(s.family == 23);
  CHECK(s.model == 1);
  CHECK(s.stepping == 2);
  // Xeon Skylake-SP: family 6, model 0x55 (extended model 5 applies to family 6).
  s = detail::DecodeSignature(0x00050654);
  CHECK(s.family == 6);
  CHECK(s.model == 85);
  CHECK(s.stepping == 4);
  // EPYC 9004 (Zen 4): family 0xF + 0xA = 25, model 0x11.
  s = detail::DecodeSignature(0x00A10F11);
  CHECK(s.family == 25);
  CHECK(s.model == 17);
  CHECK(s.stepping == 1);
  // Other base families ignore both extended fields.
  s = detail::DecodeSignature(0x0FF10523);
  CHECK(s.family == 5);
  CHECK(s.model == 2);
  CHECK(s.stepping == 3);
}

TEST_CASE("cpu_info: brand strings and /proc/cpuinfo model names are trimmed") {
  CHECK(detail::TrimBrand(std::string_view("  Intel(R) Xeon(R) CPU\0\0\0", 25)) ==
        "Intel(R) Xeon(R) CPU");
  CHECK(detail::TrimBrand(std::string_view("\0\0", 2)).empty());
  const std::string cpuinfo =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 1\n"
      "model name\t: AMD EPYC 7571\n\nprocessor\t: 1\nmodel name\t: other\n";
  CHECK(detail::ModelNameFromCpuinfo(cpuinfo) == "AMD EPYC 7571");
  CHECK(detail::ModelNameFromCpuinfo("model\t\t: 1\nmodel names: x\n").empty());
  CHECK(detail::ModelNameFromCpuinfo("").empty());
}

// A fake /sys/devices/system/cpu/cpu0/cache tree under the temp directory.
struct FakeSysfs {
  fs::path root = fs::temp_directory_path() / ("braid_cpu_info_test_" + std::to_string(getpid()));
  FakeSysfs() { fs::create_directories(root); }
  ~FakeSysfs() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void Add(int index, const std::string& level, const std::string& type, const std::string& size) {
    const fs::path dir = root / ("index" + std::to_string(index));
    fs::create_directories(dir);
    std::ofstream(dir / "level") << level << "\n";
    std::ofstream(dir / "type") << type << "\n";
    std::ofstream(dir / "size") << size << "\n";
  }
};

TEST_CASE("cpu_info: sysfs cache tree, instruction caches skipped") {
  FakeSysfs t;
  t.Add(0, "1", "Instruction", "64K");  // listed first: must not count as L1d
  t.Add(1, "1", "Data", "32K");
  t.Add(2, "2", "Unified", "512K");
  t.Add(3, "3", "Unified", "8192K");
  detail::CacheSizes c = detail::ReadSysfsCaches(t.root.string());
  CHECK(c.l1d == 32768);
  CHECK(c.l2 == 524288);
  CHECK(c.l3 == 8388608);

  t.Add(5, "4", "Unified", "128M");  // after a gap: not read
  c = detail::ReadSysfsCaches(t.root.string());
  CHECK(c.l3 == 8388608);

  c = detail::ReadSysfsCaches((t.root / "absent").string());
  CHECK(c.l1d == 0);
  CHECK(c.l2 == 0);
  CHECK(c.l3 == 0);
}

// The integer after "key<tabs/spaces>: " on the first such line of
// /proc/cpuinfo, or -1.
int CpuinfoField(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string::npos) continue;
    const std::string name = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (name == key) return std::stoi(line.substr(colon + 1));
  }
  return -1;
}

TEST_CASE("cpu_info: the host's probe is plausible and agrees with other sources") {
  const CpuInfo& cpu = HostCpu();
  INFO(DescribeCpu(cpu));
  CHECK(!cpu.model.empty());
  CHECK(cpu.logical_cpus >= 1);
#if defined(__x86_64__)
  CHECK(cpu.vendor.size() == 12);
  CHECK(cpu.avx2 == static_cast<bool>(__builtin_cpu_supports("avx2")));
  CHECK(cpu.avx512_vnni == static_cast<bool>(__builtin_cpu_supports("avx512vnni")));
#endif
  // The kernel decodes the same CPUID fields for /proc/cpuinfo.
  if (int family = CpuinfoField("cpu family"); family >= 0) CHECK(cpu.family == family);
  if (int model = CpuinfoField("model"); model >= 0) CHECK(cpu.model_id == model);
  if (int stepping = CpuinfoField("stepping"); stepping >= 0) CHECK(cpu.stepping == stepping);

  // Sizes seen on real parts, with room: L1d 8 KiB-1 MiB, L2 128 KiB-64 MiB,
  // L3 1 MiB-4 GiB; and each level no smaller than the one below it.
  if (cpu.l1d_bytes) CHECK((cpu.l1d_bytes >= (8u << 10) && cpu.l1d_bytes <= (1u << 20)));
  if (cpu.l2_bytes) CHECK((cpu.l2_bytes >= (128u << 10) && cpu.l2_bytes <= (64u << 20)));
  if (cpu.l3_bytes) CHECK((cpu.l3_bytes >= (1u << 20) && cpu.l3_bytes <= (size_t{4} << 30)));
  if (cpu.l1d_bytes && cpu.l2_bytes) CHECK(cpu.l1d_bytes <= cpu.l2_bytes);
  if (cpu.l2_bytes && cpu.l3_bytes) CHECK(cpu.l2_bytes <= cpu.l3_bytes);

  const std::string line = DescribeCpu(cpu);
  CHECK(line.find(cpu.model) == 0);
  CHECK(line.find("family " + std::to_string(cpu.family)) != std::string::npos);
}

TEST_CASE("cpu_info: HostCpu is one object, also when first called from several threads") {
  std::vector<const CpuInfo*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) threads.emplace_back([&, i] { seen[i] = &HostCpu(); });
  for (std::thread& t : threads) t.join();
  for (const CpuInfo* p : seen) CHECK(p == &HostCpu());
}

TEST_CASE("cpu_info: DescribeCpu names the model, the caches it knows and the extensions") {
  CpuInfo c;
  c.model = "AMD EPYC 7571";
  c.family = 23;
  c.model_id = 1;
  c.l1d_bytes = 32 << 10;
  c.l2_bytes = 512 << 10;
  c.l3_bytes = 8 << 20;
  c.logical_cpus = 2;
  c.avx2 = true;
  CHECK(DescribeCpu(c) ==
        "AMD EPYC 7571 (family 23 model 1), L1d 32 KiB, L2 512 KiB, L3 8 MiB, 2 CPUs, avx2");
  c.l2_bytes = 0;
  c.l3_bytes = 1536 << 10;  // 1.5 MiB: in KiB
  c.logical_cpus = 1;
  c.avx512_vnni = true;
  CHECK(DescribeCpu(c) ==
        "AMD EPYC 7571 (family 23 model 1), L1d 32 KiB, L3 1536 KiB, 1 CPU, avx2, avx512_vnni");
  c.model.clear();
  CHECK(DescribeCpu(c).rfind("unknown CPU (", 0) == 0);
}

}  // namespace
}  // namespace braid::kernels
