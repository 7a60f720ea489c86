// A fixed set of threads running queued jobs, shared fairly between clients:
// the server's programs, DAGs and session inputs each hold one thread while
// they run (and while they wait for the model), so the thread count is the
// limit on how many run at once.
//
// The rule (docs/http-api.md, "Server rules"):
//  - each client (the run's Entry::client: an API key's name) has its own
//    FIFO queue;
//  - a free thread takes the oldest job of the client that holds the fewest
//    threads, among the clients with queued jobs that are below their cap;
//    ties go to the client served least recently (round-robin);
//  - a client holds at most `max_per_client` threads at once. With a cap
//    below the thread count, a client whose jobs are stuck (until they are
//    cancelled or stopped by their limits) leaves threads - max_per_client
//    threads to the others, so another client's job starts as soon as one of
//    those is free, however many jobs the first one has.
// At most `max_queued` jobs wait in all (TrySubmit refuses beyond).
//
// FairQueue is the rule as plain data (no threads, unit-tested on its own);
// WorkPool runs it on its threads.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace braid::server {

// Per-client FIFO queues and running counts; not thread-safe (WorkPool
// guards it with its mutex).
class FairQueue {
 public:
  // A client runs at most `max_per_client` jobs at once (<= 0: no cap).
  explicit FairQueue(int max_per_client) : max_per_client_(max_per_client) {}

  void Push(const std::string& client, std::function<void()> job) {
    auto [it, fresh] = clients_.try_emplace(client);
    // A new client counts as served when it arrived: it takes its turn
    // after those waiting longer.
    if (fresh) it->second.served = ++seq_;
    it->second.jobs.push_back(std::move(job));
    ++queued_;
  }
  // The job to start now (the rule above), counted as running for its
  // client until Done(client); false when no client may start one.
  bool Pop(std::string* client, std::function<void()>* job) {
    auto best = clients_.end();
    for (auto it = clients_.begin(); it != clients_.end(); ++it) {
      const Client& c = it->second;
      if (c.jobs.empty() || (max_per_client_ > 0 && c.running >= max_per_client_)) continue;
      if (best == clients_.end() || c.running < best->second.running ||
          (c.running == best->second.running && c.served < best->second.served))
        best = it;
    }
    if (best == clients_.end()) return false;
    Client& c = best->second;
    *client = best->first;
    *job = std::move(c.jobs.front());
    c.jobs.pop_front();
    --queued_;
    ++c.running;
    ++running_;
    c.served = ++seq_;
    return true;
  }
  // A job of `client` that Pop gave has returned.
  void Done(const std::string& client) {
    auto it = clients_.find(client);
    if (it == clients_.end()) return;
    --it->second.running;
    --running_;
    if (it->second.running == 0 && it->second.jobs.empty()) clients_.erase(it);
  }
  // Drops every queued job (returned, to be destroyed outside a lock).
  std::vector<std::function<void()>> Clear() {
    std::vector<std::function<void()>> out;
    for (auto it = clients_.begin(); it != clients_.end();) {
      for (auto& j : it->second.jobs) out.push_back(std::move(j));
      it->second.jobs.clear();
      it = it->second.running == 0 ? clients_.erase(it) : std::next(it);
    }
    queued_ = 0;
    return out;
  }

  size_t queued() const { return queued_; }
  int running() const { return running_; }
  int running(const std::string& client) const {
    auto it = clients_.find(client);
    return it == clients_.end() ? 0 : it->second.running;
  }

 private:
  struct Client {
    std::deque<std::function<void()>> jobs;
    int running = 0;
    uint64_t served = 0;  // when it last started a job (or arrived)
  };
  const int max_per_client_;
  std::map<std::string, Client> clients_;  // those with jobs queued or running
  size_t queued_ = 0;
  int running_ = 0;
  uint64_t seq_ = 0;
};

// The threads. Every method may be called from any thread; Stop not from a job.
class WorkPool {
 public:
  // `threads` threads; at most `max_queued` jobs wait in all; a client runs
  // at most `max_per_client` jobs at once (<= 0: no cap).
  WorkPool(int threads, size_t max_queued, int max_per_client = 0)
      : queue_(max_per_client), max_queued_(max_queued) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~WorkPool() { Stop(); }

  // Queues `job` for `client`; false when the queue is full or the pool stopped.
  bool TrySubmit(const std::string& client, std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ || queue_.queued() >= max_queued_) return false;
      queue_.Push(client, std::move(job));
    }
    // Any idle thread may take it (or another job this one unblocks: none).
    cv_.notify_one();
    return true;
  }
  // Whether a job submitted now would be queued (a hint: others may submit).
  bool HasRoom() const {
    std::lock_guard<std::mutex> lock(mu_);
    return !stop_ && queue_.queued() < max_queued_;
  }
  size_t queued() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.queued();
  }
  // Jobs running now (all clients), or those of one client.
  int running() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.running();
  }
  int running(const std::string& client) const {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.running(client);
  }
  // Drops what is still queued (callers cancel their runs first) and joins
  // the threads once their jobs return. Idempotent.
  void Stop() {
    std::vector<std::function<void()>> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ && threads_.empty()) return;
      stop_ = true;
      dropped = queue_.Clear();
    }
    dropped.clear();  // outside the lock: a job's captures may take others
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void Loop() {
    while (true) {
      std::string client;
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || queue_.Pop(&client, &job); });
        if (stop_) return;
      }
      job();
      job = nullptr;
      std::lock_guard<std::mutex> lock(mu_);
      // This thread takes the next job itself; no other thread can start
      // one because of this (a freed slot is one thread).
      queue_.Done(client);
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  FairQueue queue_;  // guarded by mu_
  const size_t max_queued_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace braid::server
