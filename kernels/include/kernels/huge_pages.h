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
  bool operator==(const LargeAllocator<U>&) const {
    return true;
  }
};

// `bytes` of zeroed memory, 2 MiB aligned and advised as huge pages, whose
// pages are touched only where written (an anonymous mapping on Linux; a
// zeroed allocation elsewhere): a large KV pool costs memory as it fills,
// not when it is made. Throws std::bad_alloc when out of address space.
// Freed with FreeZeroed(p, bytes).
void* AllocateZeroed(size_t bytes);
void FreeZeroed(void* p, size_t bytes);

// `n` zeroed elements of T (trivial) from AllocateZeroed.
template <typename T>
class ZeroedBuffer {
 public:
  ZeroedBuffer() = default;
  explicit ZeroedBuffer(size_t n)
      : p_(n ? static_cast<T*>(AllocateZeroed(n * sizeof(T))) : nullptr), n_(n) {}
  ~ZeroedBuffer() {
    if (p_ != nullptr) FreeZeroed(p_, n_ * sizeof(T));
  }
  ZeroedBuffer(const ZeroedBuffer&) = delete;
  ZeroedBuffer& operator=(const ZeroedBuffer&) = delete;
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace braid::kernels
