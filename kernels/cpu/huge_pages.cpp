#include "kernels/huge_pages.h"

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

}  // namespace braid::kernels
