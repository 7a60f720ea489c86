// ThreadPool: workers wait for a new "generation" of work, Barrier() is a
// generation-counting (sense-reversing) barrier, and Run's caller waits for the
// workers' count to reach zero. Every one of these waits spins for a bounded
// time and then blocks on a futex, so a thread whose peer was descheduled by
// other work on the machine gives its core away instead of spinning until the
// peer comes back; an adaptive pool also narrows itself while its threads
// keep blocking (docs/kernels.md, "The thread pool").
//
// Memory ordering: Run publishes fn and the width and then bumps generation;
// workers acquire generation before reading them. Each worker's writes are
// released by its fetch_sub on pending and acquired by the caller's load. A
// waiter that blocks first counts itself in the word's sleepers and then
// re-reads the word, and a waker first changes the word and then reads
// sleepers, both seq_cst: one of the two sees the other, and the futex
// re-checks the word in the kernel.
#include "kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BRAID_PAUSE() _mm_pause()
#else
#define BRAID_PAUSE() std::this_thread::yield()
#endif

namespace braid::kernels {
namespace {

using Clock = std::chrono::steady_clock;

// How long a thread spins on a word before it blocks. A barrier inside a
// forward pass on an idle machine waits a few microseconds for the slowest
// thread; waits much longer than that mean a peer is not running, and
// spinning would only take the core from whatever runs instead. Measured on
// decode and prefill (docs/kernels.md): 5 us loses 10-25% on a quiet machine
// to futex round trips, 50 us and 200 us are equal there, and beside busy
// processes a longer spin only burns more of the shared cores.
constexpr auto kSpinWait = std::chrono::microseconds(50);
// How long an idle worker spins for the next Run before it blocks: the step
// loop's work between two forward passes (sampling, scheduling) takes longer
// than a barrier's wait.
constexpr auto kSpinIdle = std::chrono::microseconds(300);

// The adaptive width: a window of at least this much Run time decides, a
// blocked share of thread time above kNarrowShare narrows, and probes for one
// more thread come after a back-off that doubles while they fail.
constexpr auto kWindow = std::chrono::milliseconds(20);
constexpr double kNarrowShare = 0.25;
constexpr auto kFirstBackoff = std::chrono::milliseconds(250);
constexpr auto kMaxBackoff = std::chrono::seconds(8);

// A 32-bit word threads wait on until it changes, with the count of blocked
// waiters so that a waker makes a system call only when someone sleeps.
struct WaitWord {
  alignas(64) std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};

  // Returns once value != old: spins for `spin`, then blocks, adding the
  // time blocked to *blocked_ns if given.
  uint32_t WaitWhile(uint32_t old, std::chrono::microseconds spin,
                     std::atomic<int64_t>* blocked_ns) {
    const auto start = Clock::now();
    for (int i = 0;; ++i) {
      const uint32_t v = value.load(std::memory_order_acquire);
      if (v != old) return v;
      BRAID_PAUSE();
      if ((i & 63) == 63 && Clock::now() - start > spin) break;
    }
    const auto block_start = Clock::now();
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint32_t v;
    while ((v = value.load(std::memory_order_seq_cst)) == old) Block(old);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (blocked_ns)
      blocked_ns->fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - block_start).count(),
          std::memory_order_relaxed);
    return v;
  }

  // After changing value (seq_cst): wakes every blocked waiter.
  void WakeAll() {
    if (sleepers.load(std::memory_order_seq_cst) == 0) return;
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&value), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
            nullptr, 0);
#else
    value.notify_all();
#endif
  }

 private:
  // Sleeps while value == old (it may return early; callers re-check).
  void Block(uint32_t old) {
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&value), FUTEX_WAIT_PRIVATE, old, nullptr,
            nullptr, 0);
#else
    value.wait(old, std::memory_order_seq_cst);
#endif
  }
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
              std::atomic<uint32_t>::is_always_lock_free);

}  // namespace

struct ThreadPool::Impl {
  int capacity = 1;
  bool adaptive = false;
  std::vector<std::thread> workers;

  // Work hand-off: generation counts Runs (and the final stop).
  WaitWord generation;
  const std::function<void(int)>* fn = nullptr;  // valid while a Run is in flight
  int run_width = 1;                             // threads of the Run in flight
  bool stop = false;                             // published with generation
  WaitWord pending;                              // workers not yet done with this Run
  std::atomic<int> width{1};                     // threads of the next Run

  // Barrier state.
  alignas(64) std::atomic<int> barrier_count{0};
  WaitWord barrier_generation;

  // Time blocked in Barrier and at the end of the Run in flight.
  alignas(64) std::atomic<int64_t> blocked_ns{0};

  // The adaptive width's state (the Run caller's thread only).
  Clock::duration window_run{0};
  int64_t window_blocked_ns = 0;
  bool probing = false;
  Clock::time_point narrowed_at{};
  Clock::duration backoff = kFirstBackoff;
  Stats stats;

  void WorkerLoop(int index) {
    uint32_t seen = 0;
    for (;;) {
      seen = generation.WaitWhile(seen, kSpinIdle, nullptr);
      if (stop) return;
      if (index >= run_width) continue;  // not in this Run's width
      (*fn)(index);
      if (pending.value.fetch_sub(1, std::memory_order_seq_cst) == 1) pending.WakeAll();
    }
  }

  void Publish() {
    generation.value.fetch_add(1, std::memory_order_seq_cst);
    generation.WakeAll();
  }

  // After a Run of `run_width` threads that took `took` with `blocked` ns of
  // thread time blocked: the width of the next Run.
  void Adapt(Clock::duration took, int64_t blocked) {
    const int w = width.load(std::memory_order_relaxed);
    const auto now = Clock::now();
    if (w > 1) {
      window_run += took;
      window_blocked_ns += blocked;
      if (window_run < kWindow) return;
      const double thread_ns =
          static_cast<double>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(window_run).count()) *
          w;
      const bool contended = static_cast<double>(window_blocked_ns) > kNarrowShare * thread_ns;
      window_run = Clock::duration{0};
      window_blocked_ns = 0;
      if (contended) {
        width.store(w - 1, std::memory_order_relaxed);
        // A failed probe backs off longer; a first narrowing starts afresh.
        backoff = probing ? std::min<Clock::duration>(backoff * 2, kMaxBackoff) : kFirstBackoff;
        probing = false;
        narrowed_at = now;
        return;
      }
      if (probing) {
        probing = false;  // the probe held: stay, and try the next one after the first back-off
        backoff = kFirstBackoff;
        narrowed_at = now;
      }
    }
    if (w < capacity && !probing && now - narrowed_at >= backoff) {
      width.store(w + 1, std::memory_order_relaxed);
      probing = true;
      window_run = Clock::duration{0};
      window_blocked_ns = 0;
    }
  }
};

ThreadPool::ThreadPool(int n_threads, bool adaptive) : impl_(std::make_unique<Impl>()) {
  impl_->capacity = std::max(1, n_threads);
  impl_->adaptive = adaptive && impl_->capacity > 1;
  impl_->width.store(impl_->capacity, std::memory_order_relaxed);
  for (int i = 1; i < impl_->capacity; ++i) {
    impl_->workers.emplace_back([this, i] { impl_->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  impl_->stop = true;
  impl_->Publish();
  for (std::thread& t : impl_->workers) t.join();
}

int ThreadPool::size() const { return impl_->width.load(std::memory_order_relaxed); }

int ThreadPool::capacity() const { return impl_->capacity; }

ThreadPool::Stats ThreadPool::stats() const { return impl_->stats; }

void ThreadPool::Run(const std::function<void(int thread_index)>& fn) {
  Impl& p = *impl_;
  const int w = p.width.load(std::memory_order_relaxed);
  ++p.stats.runs;
  if (w < p.capacity) ++p.stats.narrowed_runs;
  const auto start = Clock::now();
  p.run_width = w;
  if (w == 1) {
    fn(0);
  } else {
    p.fn = &fn;
    p.pending.value.store(static_cast<uint32_t>(w - 1), std::memory_order_relaxed);
    p.Publish();
    fn(0);
    for (uint32_t left = p.pending.value.load(std::memory_order_acquire); left != 0;)
      left = p.pending.WaitWhile(left, kSpinWait, &p.blocked_ns);
    p.fn = nullptr;
  }
  const int64_t blocked = p.blocked_ns.exchange(0, std::memory_order_relaxed);
  p.stats.blocked_seconds += static_cast<double>(blocked) * 1e-9;
  if (p.adaptive) p.Adapt(Clock::now() - start, blocked);
}

// All threads arrive; the last resets the count and advances the generation,
// releasing the others (and with it everything written before the barrier).
void ThreadPool::Barrier() {
  Impl& p = *impl_;
  const int n = p.run_width;
  if (n <= 1) return;
  const uint32_t g = p.barrier_generation.value.load(std::memory_order_acquire);
  if (p.barrier_count.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
    p.barrier_count.store(0, std::memory_order_relaxed);
    p.barrier_generation.value.fetch_add(1, std::memory_order_seq_cst);
    p.barrier_generation.WakeAll();
    return;
  }
  p.barrier_generation.WaitWhile(g, kSpinWait, &p.blocked_ns);
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
