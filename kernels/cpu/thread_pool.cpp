// ThreadPool: workers wait for a new "generation" of work by spinning on an
// atomic counter (with _mm_pause) for a short while, then sleep on a condition
// variable. Barrier() is a generation-counting (sense-reversing) spin barrier.
//
// Memory ordering: Run publishes fn_ and then bumps generation_ with release;
// workers acquire generation_ before reading fn_. Each worker's writes are
// released by its fetch_sub on pending_ and acquired by the caller's load.
#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BRAID_PAUSE() _mm_pause()
#else
#define BRAID_PAUSE() std::this_thread::yield()
#endif

namespace braid::kernels {
namespace {

// How long an idle worker spins before sleeping, and how long a thread spins in
// Barrier or at the end of Run before yielding its core (other processes may share it).
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(300);
constexpr int kSpinsBeforeYield = 1 << 14;

}  // namespace

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> workers;

  // Work hand-off.
  std::atomic<uint64_t> generation{0};
  const std::function<void(int)>* fn = nullptr;  // valid while a Run is in flight
  bool stop = false;                             // published with generation
  std::atomic<int> pending{0};                   // workers not yet done with this Run

  // Sleeping workers.
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> sleepers{0};

  // Barrier state.
  alignas(64) std::atomic<int> barrier_count{0};
  alignas(64) std::atomic<uint64_t> barrier_generation{0};

  void WorkerLoop(int index) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = WaitForGeneration(seen);
      seen = g;
      if (stop) return;
      (*fn)(index);
      pending.fetch_sub(1, std::memory_order_release);
    }
  }

  // Spins until generation != seen, then sleeps; returns the new generation.
  uint64_t WaitForGeneration(uint64_t seen) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0;; ++i) {
      const uint64_t g = generation.load(std::memory_order_acquire);
      if (g != seen) return g;
      BRAID_PAUSE();
      if ((i & 255) == 255 && std::chrono::steady_clock::now() - start > kSpinBeforeSleep) break;
    }
    std::unique_lock<std::mutex> lock(mu);
    // seq_cst pairs with Run's seq_cst increment and load of sleepers: either we
    // see the new generation here, or Run sees sleepers > 0 and notifies under mu.
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint64_t g;
    cv.wait(lock, [&] {
      g = generation.load(std::memory_order_seq_cst);
      return g != seen;
    });
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    return g;
  }

  void Publish() {
    generation.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
  impl_->n_threads = std::max(1, n_threads);
  for (int i = 1; i < impl_->n_threads; ++i) {
    impl_->workers.emplace_back([this, i] { impl_->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  impl_->stop = true;
  impl_->Publish();
  for (std::thread& t : impl_->workers) t.join();
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::Run(const std::function<void(int thread_index)>& fn) {
  Impl& p = *impl_;
  if (p.n_threads == 1) {
    fn(0);
    return;
  }
  p.fn = &fn;
  p.pending.store(p.n_threads - 1, std::memory_order_relaxed);
  p.Publish();
  fn(0);
  for (int i = 0; p.pending.load(std::memory_order_acquire) != 0; ++i) {
    BRAID_PAUSE();
    if (i >= kSpinsBeforeYield) std::this_thread::yield();
  }
  p.fn = nullptr;
}

// All threads arrive; the last resets the count and advances the generation,
// releasing the others (and with it everything written before the barrier).
void ThreadPool::Barrier() {
  Impl& p = *impl_;
  if (p.n_threads == 1) return;
  const uint64_t g = p.barrier_generation.load(std::memory_order_acquire);
  if (p.barrier_count.fetch_add(1, std::memory_order_acq_rel) == p.n_threads - 1) {
    p.barrier_count.store(0, std::memory_order_relaxed);
    p.barrier_generation.fetch_add(1, std::memory_order_release);
    return;
  }
  for (int i = 0; p.barrier_generation.load(std::memory_order_acquire) == g; ++i) {
    BRAID_PAUSE();
    if (i >= kSpinsBeforeYield) std::this_thread::yield();
  }
}

// Part i of [0, n) split into `parts` near-equal pieces whose boundaries are
// multiples of `align` (the last part takes the remainder).
void ThreadPool::Split(int64_t n, int parts, int i, int64_t align, int64_t* begin, int64_t* end) {
  align = std::max<int64_t>(1, align);
  const int64_t units = (n + align - 1) / align;
  const int64_t b = units * i / parts * align;
  const int64_t e = units * (i + 1) / parts * align;
  *begin = std::min(b, n);
  *end = std::min(e, n);
}

}  // namespace braid::kernels
