// The caller's side of a request handle: the deltas a request's producer
// emits, in order, and its Completion once it finished. The serving engine's
// requests and the remote engine's requests keep their deltas in one.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "engine/engine.h"

namespace braid {

class DeltaQueue {
 public:
  // `on_delta` (may be empty) receives a copy of every delta, on the
  // producer's thread, after the delta was queued.
  explicit DeltaQueue(DeltaCallback on_delta = nullptr);
  DeltaQueue(const DeltaQueue&) = delete;
  DeltaQueue& operator=(const DeltaQueue&) = delete;

  // ---- consumers (any thread) ----

  // RequestHandle::Next: the oldest delta not taken yet, waiting up to
  // timeout_ms (-1 = forever) for one; nullopt on timeout, and at once when
  // the request finished and its deltas were all taken.
  std::optional<Delta> Next(int timeout_ms);
  // RequestHandle::Wait: blocks until Finish, then the Completion it gave.
  Completion Wait() const;
  // Whether Finish ran.
  bool finished() const;

  // ---- the producer (one thread at a time) ----

  // Queues a delta that is not the last, wakes a waiting Next, then calls
  // the callback (outside the lock, so that it may call Next or Wait).
  void Push(Delta delta);
  // Queues the last delta (finished is set on it) and publishes `result`:
  // from here on finished() is true and Wait returns. The callback then runs
  // as for Push. Called once.
  void Finish(Delta last, Completion result);

 private:
  void Queue(Delta delta, Completion* result);

  const DeltaCallback on_delta_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<Delta> queue_;   // guarded by mu_
  bool done_ = false;         // Finish ran (guarded by mu_)
  bool taken_final_ = false;  // Next returned the last delta (guarded by mu_)
  Completion result_;         // set by Finish (guarded by mu_)
};

}  // namespace braid
