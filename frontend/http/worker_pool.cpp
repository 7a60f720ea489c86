#include "http/worker_pool.h"

#include <cstdio>
#include <exception>

namespace braid::http {

WorkerPool::WorkerPool(int threads, size_t max_pending)
    : max_pending_(max_pending), thread_count_(static_cast<size_t>(threads)) {
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkerPool::~WorkerPool() { Stop(); }

bool WorkerPool::TrySubmit(std::function<void()>& task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Free threads take a task at once; only what is beyond them waits.
    const size_t free_threads = thread_count_ - busy_;
    if (stopping_ || queue_.size() >= max_pending_ + free_threads) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

size_t WorkerPool::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

size_t WorkerPool::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

void WorkerPool::Stop() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  dropped.clear();  // outside the lock: a task's captures may do anything when destroyed
}

void WorkerPool::Loop() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    // Tasks are written not to throw; a thread boundary still must not let
    // an exception through (it would terminate the process).
    try {
      task();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "http worker: task threw: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "http worker: task threw a non-exception\n");
    }
    task = nullptr;  // its captures go before the thread counts as free
    std::lock_guard<std::mutex> lock(mu_);
    --busy_;
  }
}

}  // namespace braid::http
