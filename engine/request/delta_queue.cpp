#include "request/delta_queue.h"

#include <chrono>
#include <utility>

namespace braid {

DeltaQueue::DeltaQueue(DeltaCallback on_delta) : on_delta_(std::move(on_delta)) {}

std::optional<Delta> DeltaQueue::Next(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return !queue_.empty() || taken_final_ || done_; };
  if (timeout_ms < 0)
    cv_.wait(lock, ready);
  else
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
  if (queue_.empty()) return std::nullopt;
  Delta d = std::move(queue_.front());
  queue_.pop_front();
  if (d.finished) taken_final_ = true;
  return d;
}

Completion DeltaQueue::Wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return result_;
}

bool DeltaQueue::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void DeltaQueue::Push(Delta delta) { Queue(std::move(delta), nullptr); }

void DeltaQueue::Finish(Delta last, Completion result) {
  last.finished = true;
  Queue(std::move(last), &result);
}

// The delta is queued (and the request marked done) before the callback
// runs, so a callback may call Wait() on this request.
void DeltaQueue::Queue(Delta delta, Completion* result) {
  Delta copy;
  if (on_delta_) copy = delta;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(delta));
    if (result) {
      result_ = std::move(*result);
      done_ = true;
    }
    cv_.notify_all();
  }
  if (on_delta_) on_delta_(copy);
}

}  // namespace braid
