// The CPU probe: CPUID for the identity and the ISA extensions, Linux sysfs
// (else CPUID's cache leaves) for the cache sizes, /proc/cpuinfo as the
// fallback brand string.
#include "kernels/cpu_info.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "cpu/cpu_info_detail.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace braid::kernels {
namespace detail {

size_t ParseCacheSize(std::string_view text) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  size_t i = 0, value = 0;
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const size_t digit = static_cast<size_t>(text[i] - '0');
    if (value > (kMax - digit) / 10) return 0;
    value = value * 10 + digit;
  }
  if (i == 0) return 0;
  int shift = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'K':
      case 'k':
        shift = 10;
        break;
      case 'M':
      case 'm':
        shift = 20;
        break;
      case 'G':
      case 'g':
        shift = 30;
        break;
      default:
        return 0;
    }
    if (++i != text.size()) return 0;
  }
  if (value > (kMax >> shift)) return 0;
  return value << shift;
}

bool ReadText(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::ostringstream s;
  s << f.rdbuf();
  *out = s.str();
  return true;
}

CacheSizes ReadSysfsCaches(const std::string& dir) {
  CacheSizes c;
  for (int i = 0;; ++i) {
    const std::string base = dir + "/index" + std::to_string(i) + "/";
    std::string level, type, size;
    if (!ReadText(base + "level", &level)) break;
    if (!ReadText(base + "type", &type) || !ReadText(base + "size", &size)) continue;
    if (type.rfind("Data", 0) != 0 && type.rfind("Unified", 0) != 0) continue;
    const size_t bytes = ParseCacheSize(size);
    size_t* slot = nullptr;
    switch (ParseCacheSize(level)) {  // a plain number, the same parse
      case 1:
        slot = &c.l1d;
        break;
      case 2:
        slot = &c.l2;
        break;
      case 3:
        slot = &c.l3;
        break;
      default:
        break;
    }
    if (slot != nullptr && *slot == 0) *slot = bytes;
  }
  return c;
}

Signature DecodeSignature(uint32_t eax) {
  const int base_family = static_cast<int>((eax >> 8) & 0xF);
  const int base_model = static_cast<int>((eax >> 4) & 0xF);
  Signature s;
  s.stepping = static_cast<int>(eax & 0xF);
  s.family = base_family == 0xF ? base_family + static_cast<int>((eax >> 20) & 0xFF) : base_family;
  s.model = base_family == 0x6 || base_family == 0xF
                ? base_model + (static_cast<int>((eax >> 16) & 0xF) << 4)
                : base_model;
  return s;
}

std::string TrimBrand(std::string_view s) {
  auto is_pad = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0'; };
  while (!s.empty() && is_pad(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_pad(s.back())) s.remove_suffix(1);
  return std::string(s);
}

std::string ModelNameFromCpuinfo(std::string_view text) {
  constexpr std::string_view kKey = "model name";
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (line.substr(0, kKey.size()) != kKey) continue;
    const size_t colon = line.find(':');
    // Between the key and the colon only padding ("model name\t: AMD EPYC").
    if (colon == std::string_view::npos ||
        line.substr(kKey.size(), colon - kKey.size()).find_first_not_of(" \t") !=
            std::string_view::npos)
      continue;
    return TrimBrand(line.substr(colon + 1));
  }
  return {};
}

}  // namespace detail

namespace {

#if defined(__x86_64__)
struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs Cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Regs r;
  __cpuid_count(leaf, subleaf, r.a, r.b, r.c, r.d);
  return r;
}

// XCR0: which register state the OS saves across context switches.
uint64_t Xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Deterministic cache parameters: Intel's leaf 4 and AMD's 0x8000001D share
// the layout. Size = ways x partitions x line bytes x sets.
detail::CacheSizes CpuidCaches(uint32_t leaf) {
  detail::CacheSizes c;
  for (uint32_t i = 0; i < 16; ++i) {
    const Regs r = Cpuid(leaf, i);
    const uint32_t type = r.a & 0x1F;  // 0 none (end of list), 1 data, 2 instruction, 3 unified
    if (type == 0) break;
    if (type == 2) continue;
    const uint32_t level = (r.a >> 5) & 0x7;
    const size_t bytes = size_t{(r.b >> 22) + 1} * (((r.b >> 12) & 0x3FF) + 1) *
                         ((r.b & 0xFFF) + 1) * (size_t{r.c} + 1);
    size_t* slot = level == 1 ? &c.l1d : level == 2 ? &c.l2 : level == 3 ? &c.l3 : nullptr;
    if (slot != nullptr && *slot == 0) *slot = bytes;
  }
  return c;
}
#endif

CpuInfo Probe() {
  CpuInfo info;
  detail::CacheSizes cpuid_caches;
#if defined(__x86_64__)
  const Regs l0 = Cpuid(0);
  const uint32_t max_leaf = l0.a;
  char vendor[13] = {};
  std::memcpy(vendor, &l0.b, 4);
  std::memcpy(vendor + 4, &l0.d, 4);
  std::memcpy(vendor + 8, &l0.c, 4);
  info.vendor = vendor;

  const Regs l1 = Cpuid(1);
  const detail::Signature sig = detail::DecodeSignature(l1.a);
  info.family = sig.family;
  info.model_id = sig.model;
  info.stepping = sig.stepping;

  // Usable, as __builtin_cpu_supports decides: the CPU lists the extension
  // and the OS saves its registers (OSXSAVE, then XCR0's SSE+AVX bits for
  // ymm, plus opmask and both zmm halves for AVX-512).
  const bool osxsave = (l1.c >> 27) & 1;
  const uint64_t xcr0 = osxsave ? Xcr0() : 0;
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;
  if (max_leaf >= 7) {
    const Regs l7 = Cpuid(7, 0);
    info.avx2 = ymm_state && ((l7.b >> 5) & 1);
    info.avx512_vnni = zmm_state && ((l7.c >> 11) & 1);
  }

  const uint32_t max_ext = Cpuid(0x80000000).a;
  if (max_ext >= 0x80000004) {
    char brand[48];
    for (uint32_t i = 0; i < 3; ++i) {
      const Regs r = Cpuid(0x80000002 + i);
      const uint32_t part[4] = {r.a, r.b, r.c, r.d};  // 16 characters in this order
      std::memcpy(brand + 16 * i, part, sizeof part);
    }
    info.model = detail::TrimBrand(std::string_view(brand, sizeof brand));
  }
  const bool amd_like = info.vendor == "AuthenticAMD" || info.vendor == "HygonGenuine";
  if (amd_like && max_ext >= 0x8000001D && ((Cpuid(0x80000001).c >> 22) & 1)) {  // TOPOEXT
    cpuid_caches = CpuidCaches(0x8000001D);
  } else if (!amd_like && max_leaf >= 4) {
    cpuid_caches = CpuidCaches(4);
  }
#endif
  if (info.model.empty()) {
    std::string cpuinfo;
    if (detail::ReadText("/proc/cpuinfo", &cpuinfo))
      info.model = detail::ModelNameFromCpuinfo(cpuinfo);
  }

  // sysfs first, per level: under a hypervisor it is what the guest kernel
  // was told (an EPYC guest sees its 8 MiB CCX L3 there while glibc's CPUID
  // reading says 64 MiB).
  const detail::CacheSizes sys = detail::ReadSysfsCaches("/sys/devices/system/cpu/cpu0/cache");
  info.l1d_bytes = sys.l1d ? sys.l1d : cpuid_caches.l1d;
  info.l2_bytes = sys.l2 ? sys.l2 : cpuid_caches.l2;
  info.l3_bytes = sys.l3 ? sys.l3 : cpuid_caches.l3;

  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  info.logical_cpus = n > 0 ? static_cast<int>(n) : 0;
  return info;
}

// "32 KiB", "8 MiB", or bytes when neither divides.
std::string FormatBytes(size_t bytes) {
  char buf[32];
  if (bytes % (size_t{1} << 20) == 0)
    std::snprintf(buf, sizeof buf, "%zu MiB", bytes >> 20);
  else if (bytes % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%zu KiB", bytes >> 10);
  else
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

}  // namespace

const CpuInfo& HostCpu() {
  static const CpuInfo info = Probe();  // initialised once, thread-safe (C++11 statics)
  return info;
}

std::string DescribeCpu(const CpuInfo& cpu) {
  std::string s = cpu.model.empty() ? "unknown CPU" : cpu.model;
  s += " (family " + std::to_string(cpu.family) + " model " + std::to_string(cpu.model_id) + ")";
  const std::pair<const char*, size_t> caches[] = {
      {"L1d", cpu.l1d_bytes}, {"L2", cpu.l2_bytes}, {"L3", cpu.l3_bytes}};
  for (const auto& [name, bytes] : caches)
    if (bytes != 0) s += std::string(", ") + name + " " + FormatBytes(bytes);
  s += ", " + std::to_string(cpu.logical_cpus) + (cpu.logical_cpus == 1 ? " CPU" : " CPUs");
  if (cpu.avx2) s += ", avx2";
  if (cpu.avx512_vnni) s += ", avx512_vnni";
  return s;
}

}  // namespace braid::kernels
