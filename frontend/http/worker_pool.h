// A fixed set of threads running tasks from a bounded queue: the handlers'
// pool. A full queue refuses work (the caller answers 429) instead of
// growing, so a flood of requests costs memory for max_pending of them only.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace braid::http {

class WorkerPool {
 public:
  // Starts `threads` threads; at most `max_pending` tasks wait beyond those
  // running (0: a task is taken only when a thread is free).
  WorkerPool(int threads, size_t max_pending);
  ~WorkerPool();  // Stop()s

  // Queues `task`; false (and `task` untouched) when max_pending tasks are
  // already waiting or the pool is stopped. Any thread.
  bool TrySubmit(std::function<void()>& task);
  // Tasks waiting now (not the running ones).
  size_t queued() const;
  // Tasks running now.
  size_t busy() const;
  // Lets running tasks return, drops waiting ones (destroying them on this
  // thread), joins the threads. Idempotent; not from a task.
  void Stop();

 private:
  void Loop();

  const size_t max_pending_;
  const size_t thread_count_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  size_t busy_ = 0;  // threads running a task
  std::vector<std::thread> threads_;
};

}  // namespace braid::http
