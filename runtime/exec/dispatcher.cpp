#include "exec/dispatcher.h"

#include <algorithm>

namespace braid::rt {

CostModel RuntimeContext::Rates() const {
  CostModel m;
  double prefill = 0, decode = 0;
  int np = 0, nd = 0;
  for (const PlacementEngine& e : placement->engines()) {
    const EngineStats s = e.engine->stats();
    if (s.prefill_tokens_per_s > 0) prefill += s.prefill_tokens_per_s, ++np;
    if (s.decode_tokens_per_s > 0) decode += s.decode_tokens_per_s, ++nd;
  }
  if (np) m.prefill_tokens_per_s = prefill / np;
  if (nd) m.decode_tokens_per_s = decode / nd;
  return m;
}

Dispatcher::Dispatcher(std::shared_ptr<RuntimeContext> ctx) : ctx_(std::move(ctx)) {
  thread_ = std::thread([this] { Loop(); });
}

Dispatcher::~Dispatcher() {
  {
    std::lock_guard<std::mutex> lock(ctx_->wake->mu);
    ctx_->wake->stop = true;
    ctx_->wake->cv.notify_all();
  }
  thread_.join();
  std::lock_guard<std::mutex> lock(runs_mu_);
  for (auto& w : runs_)
    if (auto r = w.lock()) r->Shutdown();
}

void Dispatcher::Add(const std::shared_ptr<Pumpable>& run) {
  {
    std::lock_guard<std::mutex> lock(runs_mu_);
    runs_.push_back(run);
  }
  ctx_->wake->Raise();
}

void Dispatcher::Loop() {
  WakeSignal& w = *ctx_->wake;
  while (true) {
    std::vector<std::shared_ptr<Pumpable>> live;
    {
      std::lock_guard<std::mutex> lock(runs_mu_);
      std::erase_if(runs_, [](const std::weak_ptr<Pumpable>& r) {
        auto p = r.lock();
        return !p || p->Closed();
      });
      for (auto& r : runs_)
        if (auto p = r.lock()) live.push_back(std::move(p));
    }
    // Idle wake-ups at least once a second keep a missed signal harmless.
    Clock::time_point next = Clock::now() + std::chrono::seconds(1);
    for (auto& r : live)
      if (auto t = r->Pump()) next = std::min(next, *t);
    live.clear();  // a run dropped by its owner dies here, not under the lock below
    std::unique_lock<std::mutex> lock(w.mu);
    w.cv.wait_until(lock, next, [&] { return w.raised || w.stop; });
    if (w.stop) return;
    w.raised = false;
  }
}

}  // namespace braid::rt
