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

struct EngineSlot {
  Engine* engine = nullptr;
  std::string name;
  // The engine runs its model in this process (Engine::model() non-null):
  // only such an engine scores choices and masks logits.
  bool local = true;
  std::shared_ptr<std::atomic<int>> in_flight = std::make_shared<std::atomic<int>>(0);
};

// Everything runs share with the dispatcher; immutable after Runtime::Open
// (the store and engines are thread-safe themselves).
struct RuntimeContext {
  std::vector<EngineSlot> engines;
  const Model* tokenizer = nullptr;  // RuntimeOptions::tokenizer, resolved
  std::shared_ptr<RunStore> store;  // null: not persisted
  std::shared_ptr<WakeSignal> wake = std::make_shared<WakeSignal>();
  std::shared_ptr<Placer> placer = std::make_shared<Placer>();  // RuntimeOptions::placement
  RetentionOptions retention;
  std::shared_ptr<GapModel> gaps;  // set when retention.pin or retention.expect

  // Placement among the engines that can take the request: alive
  // (Engine::alive) and, when needs_local (select and regex outputs), local.
  // The placer chooses among them (runtime/placement.h), by the cached
  // prefix of `prompt` only when prefer_prefix; a load is running +
  // waiting, or our own in-flight count when higher. -1 when none can take
  // it (NoEngineReason says why).
  int PickEngine(const std::vector<int32_t>& prompt, uint64_t salt, bool prefer_prefix,
                 bool needs_local = false, bool latency = false) const;
  // Whether engine `i` can take a request now (see PickEngine).
  bool CanTake(int i, bool needs_local) const;
  // Why PickEngine found no engine: each engine and what it lacks.
  std::string NoEngineReason(bool needs_local) const;
  // The engines' measured rates, averaged; defaults where unmeasured.
  CostModel Rates() const;
};

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
