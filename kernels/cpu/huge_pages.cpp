#include "kernels/huge_pages.h"

#include <cstdint>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace braid::kernels {

void* AllocateLarge(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const bool huge = bytes >= (size_t{1} << 20);
  const size_t align = huge ? kHuge : 64;
  const size_t size = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size == 0 ? align : size);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__)
  if (huge) madvise(p, size, MADV_HUGEPAGE);  // advice only: failure keeps small pages
#endif
  return p;
}

// A mapping of bytes + 2 MiB, trimmed to the 2 MiB-aligned part, so that
// FreeZeroed can unmap exactly [p, p + rounded bytes).
void* AllocateZeroed(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
#if defined(__linux__)
  void* m = mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (base + kHuge - 1) / kHuge * kHuge;
  if (aligned > base) munmap(m, aligned - base);
  const uintptr_t end = base + size + kHuge;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // advice only
  return reinterpret_cast<void*>(aligned);
#else
  void* p = std::aligned_alloc(kHuge, size);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, size);
  return p;
#endif
}

void FreeZeroed(void* p, size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
#if defined(__linux__)
  munmap(p, (bytes + kHuge - 1) / kHuge * kHuge);
#else
  (void)bytes;
  std::free(p);
#endif
}

}  // namespace braid::kernels
