// Large buffers on transparent huge pages where the OS offers them: weights
// and KV blocks are streamed every step, and with 2 MiB pages that stream
// misses the TLB 512x less often than with 4 KiB pages.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace braid::kernels {

// `bytes` of memory, 64-byte aligned; from 1 MiB up, 2 MiB aligned and
// advised as huge pages (Linux MADV_HUGEPAGE; elsewhere a plain allocation).
// Freed with std::free. Throws std::bad_alloc when out of memory.
void* AllocateLarge(size_t bytes);

template <typename T>
struct LargeAllocator {
  using value_type = T;
  LargeAllocator() = default;
  template <typename U>
  LargeAllocator(const LargeAllocator<U>&) {}  // NOLINT: converting, as allocators do
  T* allocate(size_t n) { return static_cast<T*>(AllocateLarge(n * sizeof(T))); }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const LargeAllocator<U>&) const { return true; }
};

}  // namespace braid::kernels
