// A fixed pool of worker threads for one forward pass at a time.
//
// Run(fn) executes fn(i) on every thread i in [0, size()) — the calling thread
// is thread 0 — and returns when all have finished. Inside fn, Barrier() is a
// barrier across all size() threads, so a whole forward pass can run as one
// parallel region with one barrier per stage instead of one wake-up per op.
// Every wait (a barrier, the end of a Run, a worker between Runs) spins for a
// bounded time and then sleeps on a futex, so a machine shared with other work
// does not turn one descheduled thread into every thread spinning.
//
// Run must not be called concurrently from two threads, nor from inside fn.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace braid::kernels {

class ThreadPool {
 public:
  // n_threads >= 1, counting the caller. An adaptive pool narrows itself when
  // the machine is oversubscribed: when its threads spend over a quarter of a
  // Run's time blocked in waits (peers descheduled by other work), the next
  // Runs use one thread fewer; after a back-off (0.25 s, doubling to 8 s while
  // probes fail) it tries one more again.
  explicit ThreadPool(int n_threads, bool adaptive = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The threads the next Run uses (fn sees indices [0, size())): capacity()
  // unless an adaptive pool narrowed itself. Changes only at the end of a Run,
  // so work planned between Runs with size() holds for the next one.
  int size() const;
  int capacity() const;  // the threads the pool was made with; size per-thread buffers by this
  void Run(const std::function<void(int thread_index)>& fn);
  void Barrier();

  struct Stats {
    uint64_t runs = 0;           // Runs so far
    uint64_t narrowed_runs = 0;  // of those, Runs on fewer than capacity() threads
    double blocked_seconds = 0;  // thread time spent blocked in Barrier and at the end of Runs
  };
  Stats stats() const;  // from the thread that calls Run

  // Splits [0, n) into size() near-equal contiguous parts rounded to `align`;
  // returns part `i` as [*begin, *end).
  static void Split(int64_t n, int parts, int i, int64_t align, int64_t* begin, int64_t* end);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::kernels
