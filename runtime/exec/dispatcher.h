// The Runtime's dispatcher thread and what runs share with it: the engines,
// the store, and the wake-up signal that engine callbacks and program-thread
// calls raise when something changed.
//
// The thread pumps every live run (Pumpable::Pump) whenever it is woken or a
// run's timer is due. Runs do their own work inside Pump under their own lock;
// the dispatcher only drives them. Engine callbacks never block: they append
// to a run's inbox and raise the signal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exec/retention.h"
#include "graph/deduction.h"
#include "runtime/placement.h"
#include "runtime/runtime.h"

namespace braid::rt {

class RunStore;
using Clock = std::chrono::steady_clock;

// A raised flag with a condition variable; shared so that late engine
// callbacks never touch a destroyed dispatcher.
struct WakeSignal {
  std::mutex mu;
  std::condition_variable cv;
  bool raised = false;
  bool stop = false;
  void Raise() {
    std::lock_guard<std::mutex> lock(mu);
    raised = true;
    cv.notify_all();
  }
};

// Everything runs share with the dispatcher; immutable after Runtime::Open
// (the store and engines are thread-safe themselves).
struct RuntimeContext {
  // The engines and RuntimeOptions::placement: which engine takes a call.
  std::shared_ptr<const EnginePlacement> placement;
  const Model* tokenizer = nullptr;  // RuntimeOptions::tokenizer, resolved
  std::shared_ptr<RunStore> store;   // null: not persisted
  std::shared_ptr<WakeSignal> wake = std::make_shared<WakeSignal>();
  RetentionOptions retention;
  std::shared_ptr<GapModel> gaps;  // set when retention.pin or retention.expect

  const PlacementEngine& engine(int i) const { return placement->engine(i); }
  int num_engines() const { return static_cast<int>(placement->engines().size()); }
  // The engines' measured rates, averaged; defaults where unmeasured.
  CostModel Rates() const;
};

// Milliseconds from `t0` to now: a run's clock.
inline double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

class Pumpable {
 public:
  virtual ~Pumpable() = default;
  // Does every piece of work that is due. Returns when it wants to be pumped
  // again at the latest (nullopt: only when woken).
  virtual std::optional<Clock::time_point> Pump() = 0;
  // True once the run is over (finished or cancelled, nothing in flight).
  virtual bool Closed() const = 0;
  // The runtime is going away: cancel what is in flight.
  virtual void Shutdown() = 0;
};

class Dispatcher {
 public:
  explicit Dispatcher(std::shared_ptr<RuntimeContext> ctx);
  ~Dispatcher();  // shuts the runs down and joins the thread
  void Add(const std::shared_ptr<Pumpable>& run);

 private:
  void Loop();

  std::shared_ptr<RuntimeContext> ctx_;
  std::mutex runs_mu_;
  std::vector<std::weak_ptr<Pumpable>> runs_;
  std::thread thread_;
};

}  // namespace braid::rt
