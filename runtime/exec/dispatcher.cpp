#include "exec/dispatcher.h"

#include <algorithm>

namespace braid::rt {

bool RuntimeContext::CanTake(int i, bool needs_local) const {
  if (i < 0 || i >= static_cast<int>(engines.size())) return false;
  const EngineSlot& e = engines[static_cast<size_t>(i)];
  return (e.local || !needs_local) && e.engine->alive();
}

int RuntimeContext::PickEngine(const std::vector<int32_t>& prompt, uint64_t salt,
                               bool prefer_prefix, bool needs_local, bool latency) const {
  std::vector<int> index;
  std::vector<PlacementCandidate> candidates;
  for (size_t i = 0; i < engines.size(); ++i) {
    if (!CanTake(static_cast<int>(i), needs_local)) continue;
    const EngineSlot& e = engines[i];
    PlacementCandidate c;
    if (prefer_prefix && placer->wants_prefix()) c.cached = e.engine->ProbePrefix(prompt, salt);
    const EngineStats s = e.engine->stats();
    c.load = std::max(s.running + s.waiting, e.in_flight->load());
    c.waiting = s.waiting;
    index.push_back(static_cast<int>(i));
    candidates.push_back(c);
  }
  const int chosen = placer->Choose(candidates, latency);
  return chosen < 0 ? -1 : index[static_cast<size_t>(chosen)];
}

std::string RuntimeContext::NoEngineReason(bool needs_local) const {
  std::string out = needs_local ? "no engine can take it (select and regex outputs need an "
                                  "engine that runs its model in this process):"
                                : "no engine can take it:";
  for (size_t i = 0; i < engines.size(); ++i) {
    const EngineSlot& e = engines[i];
    out += (i ? ", " : " ") + e.name;
    if (!e.engine->alive())
      out += " is not alive";
    else if (needs_local && !e.local)
      out += " is remote";
    else
      out += " is available";
  }
  return out;
}

CostModel RuntimeContext::Rates() const {
  CostModel m;
  double prefill = 0, decode = 0;
  int np = 0, nd = 0;
  for (const EngineSlot& e : engines) {
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
