// The parsing steps of the CPU probe (cpu_info.cpp), apart so that tests can
// feed them text and fake sysfs trees instead of this machine's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace braid::kernels::detail {

// A sysfs cache size ("32K", "8192K", "1M", or plain bytes "512") in bytes;
// surrounding whitespace (the trailing newline) is ignored. 0 for anything
// else: empty, no digits, an unknown suffix, trailing text, overflow.
size_t ParseCacheSize(std::string_view text);

// The whole of a small text file (sysfs, procfs, cgroupfs); false when it
// cannot be opened.
bool ReadText(const std::string& path, std::string* out);

struct CacheSizes {
  size_t l1d = 0, l2 = 0, l3 = 0;  // bytes; 0 where not listed
};

// Reads `dir`/index0, index1, ... (each with the files level, type, size), as
// Linux lays out /sys/devices/system/cpu/cpu0/cache, up to the first index
// that is missing. Instruction caches are skipped; of two caches on one level
// the first listed counts. All 0 when `dir` does not exist.
CacheSizes ReadSysfsCaches(const std::string& dir);

// Family, model and stepping from CPUID leaf 1 EAX, with the documented
// extensions: family = base + extended family when base is 0xF; model =
// base + (extended model << 4) when base family is 0x6 or 0xF.
struct Signature {
  int family = 0, model = 0, stepping = 0;
};
Signature DecodeSignature(uint32_t leaf1_eax);

// `s` without leading and trailing spaces, tabs, newlines and NUL bytes (CPUID
// brand strings are NUL-padded, some with leading spaces).
std::string TrimBrand(std::string_view s);

// The value of the first "model name" line of /proc/cpuinfo text, trimmed;
// empty when there is none.
std::string ModelNameFromCpuinfo(std::string_view cpuinfo);

}  // namespace braid::kernels::detail
