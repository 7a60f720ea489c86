// A fixed pool of worker threads for one forward pass at a time.
//
// Run(fn) executes fn(i) on every thread i in [0, size()) — the calling thread
// is thread 0 — and returns when all have finished. Inside fn, Barrier() is a
// spin barrier across all size() threads, so a whole forward pass can run as
// one parallel region with one barrier per stage instead of one wake-up per op.
// Between Runs the workers spin briefly, then sleep.
//
// Run must not be called concurrently from two threads, nor from inside fn.
#pragma once

#include <functional>
#include <memory>

namespace braid::kernels {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1, counting the caller
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  void Run(const std::function<void(int thread_index)>& fn);
  void Barrier();

  // Splits [0, n) into size() near-equal contiguous parts rounded to `align`;
  // returns part `i` as [*begin, *end).
  static void Split(int64_t n, int parts, int i, int64_t align, int64_t* begin, int64_t* end);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::kernels
