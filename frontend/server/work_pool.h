// A fixed set of threads running queued jobs, with a bounded queue: the
// server's programs and DAGs each hold one thread while they wait for the
// model, so the thread count is the limit on how many run at once.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace braid::server {

class WorkPool {
 public:
  WorkPool(int threads, size_t max_queued) : max_queued_(max_queued) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~WorkPool() { Stop(); }

  // Queues `job`; false when the queue is full or the pool stopped.
  bool TrySubmit(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ || queue_.size() >= max_queued_) return false;
      queue_.push_back(std::move(job));
    }
    cv_.notify_one();
    return true;
  }
  // Whether a job submitted now would be queued (a hint: others may submit).
  bool HasRoom() const {
    std::lock_guard<std::mutex> lock(mu_);
    return !stop_ && queue_.size() < max_queued_;
  }
  size_t queued() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.size();
  }
  // Drops what is still queued (callers cancel their runs first) and joins
  // the threads once their jobs return. Idempotent.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ && threads_.empty()) return;
      stop_ = true;
      queue_.clear();
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  const size_t max_queued_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace braid::server
