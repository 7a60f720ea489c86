#include "sched/policy.h"

#include <algorithm>
#include <limits>

namespace braid {

bool MoreUrgent(const Urgency& a, const Urgency& b) {
  if (a.goal != b.goal) return a.goal == GoalClass::kLatency;
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.deadline.has_value() != b.deadline.has_value()) return a.deadline.has_value();
  if (a.deadline && *a.deadline != *b.deadline) return *a.deadline < *b.deadline;
  if (a.arrival != b.arrival) return a.arrival < b.arrival;
  return a.id < b.id;
}

namespace {

bool ArrivalBefore(const SeqState& a, const SeqState& b) {
  return a.arrival != b.arrival ? a.arrival < b.arrival : a.id < b.id;
}

bool UrgencyBefore(const SeqState& a, const SeqState& b) {
  return MoreUrgent({a.goal, a.priority, a.deadline, a.arrival, a.id},
                    {b.goal, b.priority, b.deadline, b.arrival, b.id});
}

class FcfsPolicy final : public AdmissionPolicy {
 public:
  const char* name() const override { return "fcfs"; }
  bool Before(const SeqState& a, const SeqState& b) const override { return ArrivalBefore(a, b); }
};

class PriorityPolicy final : public AdmissionPolicy {
 public:
  const char* name() const override { return "priority"; }
  bool Before(const SeqState& a, const SeqState& b) const override { return UrgencyBefore(a, b); }
};

}  // namespace

SeqState* AdmissionPolicy::Pick(std::span<SeqState* const> waiting,
                                std::span<const int> cached) const {
  return *std::min_element(waiting.begin(), waiting.end(),
                           [&](const SeqState* a, const SeqState* b) { return Before(*a, *b); });
}

SeqState* VtcPolicy::Pick(std::span<SeqState* const> waiting, std::span<const int> cached) const {
  SeqState* first = AdmissionPolicy::Pick(waiting, cached);
  if (options_.locality_bound <= 0 || cached.size() != waiting.size()) return first;
  // The lowest counter among the first's goal class.
  double lowest = std::numeric_limits<double>::infinity();
  for (const SeqState* w : waiting)
    if (w->goal == first->goal) lowest = std::min(lowest, counter(w->client));
  SeqState* best = first;
  int best_cached = -1;
  for (size_t i = 0; i < waiting.size(); ++i) {
    SeqState* w = waiting[i];
    if (w->goal != first->goal || counter(w->client) > lowest + options_.locality_bound) continue;
    if (cached[i] > best_cached || (cached[i] == best_cached && Before(*w, *best))) {
      best = w;
      best_cached = cached[i];
    }
  }
  return best;
}

double VtcPolicy::counter(const std::string& client) const {
  auto it = accounts_.find(client);
  return it == accounts_.end() ? 0.0 : it->second.counter;
}

double VtcPolicy::weight(const std::string& client) const {
  auto it = options_.client_weights.find(client);
  return it == options_.client_weights.end() ? 1.0 : it->second;
}

namespace {

// Drops the idle account at `it` (no sequences left) once `accounts` holds
// more than `max_idle`.
template <class Map>
void ReleaseIdle(Map& accounts, typename Map::iterator it, size_t max_idle) {
  if (it->second.live <= 0 && accounts.size() > max_idle) accounts.erase(it);
}

}  // namespace

size_t ProgramAccounts::KeyHash::operator()(const Key& k) const {
  return k.own ? std::hash<RequestId>{}(k.id) * 0x9e3779b97f4a7c15
               : std::hash<std::string>{}(k.program);
}

ProgramAccounts::Key ProgramAccounts::KeyOf(const SeqState& s) const {
  const bool own = own_ && s.program.empty();
  return {s.program, own, own ? s.id : 0};
}

void ProgramAccounts::Join(const SeqState& s) {
  auto [it, fresh] = accounts_.try_emplace(KeyOf(s));
  if (fresh) it->second.since = {s.arrival, s.id};
  ++it->second.live;
}

void ProgramAccounts::Charge(const SeqState& s, double service) {
  auto [it, fresh] = accounts_.try_emplace(KeyOf(s));
  if (fresh) it->second.since = {s.arrival, s.id};
  it->second.service += service;
}

void ProgramAccounts::Leave(const SeqState& s) {
  const Key key = KeyOf(s);
  auto it = accounts_.find(key);
  if (it == accounts_.end()) return;
  --it->second.live;
  if (key.own && it->second.live <= 0)
    accounts_.erase(it);
  else
    ReleaseIdle(accounts_, it, kMaxIdle);
}

ProgramAccounts::Standing ProgramAccounts::Of(const SeqState& s) const {
  auto it = accounts_.find(KeyOf(s));
  if (it == accounts_.end()) return {0, {s.arrival, s.id}};
  return {Level(it->second.service), it->second.since};
}

bool ProgramAccounts::Same(const SeqState& a, const SeqState& b) const {
  return KeyOf(a) == KeyOf(b);
}

double ProgramAccounts::service(const std::string& program) const {
  auto it = accounts_.find(Key{program, false, 0});
  return it == accounts_.end() ? 0.0 : it->second.service;
}

int ProgramAccounts::Level(double service) const {
  if (quantum_ <= 0) return 0;
  int level = 0;
  for (double edge = quantum_; service >= edge && level < 60; edge *= 2) ++level;
  return level;
}

bool VtcPolicy::Before(const SeqState& a, const SeqState& b) const {
  if (a.goal != b.goal) return a.goal == GoalClass::kLatency;
  if (a.client != b.client) {
    const double ca = counter(a.client), cb = counter(b.client);
    if (ca != cb) return ca < cb;
  } else if (!programs_.Same(a, b)) {
    const ProgramAccounts::Standing pa = programs_.Of(a), pb = programs_.Of(b);
    if (pa.level != pb.level) return pa.level < pb.level;
    if (pa.since != pb.since) return pa.since < pb.since;
  }
  return UrgencyBefore(a, b);
}

void VtcPolicy::OnWaiting(const SeqState& s, std::span<SeqState* const> waiting) {
  Account& a = accounts_[s.client];
  if (s.preemptions == 0) {  // new (a preempted sequence was counted when it came)
    ++a.live;
    programs_.Join(s);
  }
  double lowest = std::numeric_limits<double>::infinity();
  for (const SeqState* w : waiting) {
    if (w->client == s.client) return;  // its queue was not empty: no lift
    lowest = std::min(lowest, counter(w->client));
  }
  if (lowest != std::numeric_limits<double>::infinity()) a.counter = std::max(a.counter, lowest);
}

void VtcPolicy::OnFinish(const SeqState& s) {
  if (auto it = accounts_.find(s.client); it != accounts_.end()) {
    --it->second.live;
    ReleaseIdle(accounts_, it, kMaxIdleClients);
  }
  programs_.Leave(s);
}

void VtcPolicy::OnService(const SeqState& s, int prompt_tokens, int cached_tokens, int generated) {
  const double service = options_.prompt_weight * prompt_tokens +
                         options_.cached_weight * cached_tokens +
                         options_.generated_weight * generated;
  if (service == 0) return;
  accounts_[s.client].counter += service / weight(s.client);
  programs_.Charge(s, service);
}

bool LpmPolicy::Before(const SeqState& a, const SeqState& b) const { return ArrivalBefore(a, b); }

SeqState* LpmPolicy::Pick(std::span<SeqState* const> waiting, std::span<const int> cached) const {
  if (cached.size() != waiting.size()) return AdmissionPolicy::Pick(waiting, cached);
  size_t best = 0;
  for (size_t i = 1; i < waiting.size(); ++i)
    if (cached[i] > cached[best] ||
        (cached[i] == cached[best] && Before(*waiting[i], *waiting[best])))
      best = i;
  return waiting[best];
}

bool PlasPolicy::Before(const SeqState& a, const SeqState& b) const {
  if (a.goal != b.goal) return a.goal == GoalClass::kLatency;
  const ProgramAccounts::Standing pa = programs_.Of(a), pb = programs_.Of(b);
  if (pa.level != pb.level) return pa.level < pb.level;
  // A deadline before none (comparing deadlines only where both have one
  // would not be an order: calls with and without deadlines could go round
  // in a circle), then the earlier one.
  if (a.deadline.has_value() != b.deadline.has_value()) return a.deadline.has_value();
  if (a.deadline && *a.deadline != *b.deadline) return *a.deadline < *b.deadline;
  if (pa.since != pb.since) return pa.since < pb.since;
  return ArrivalBefore(a, b);
}

SeqState* PlasPolicy::Pick(std::span<SeqState* const> waiting, std::span<const int> cached) const {
  SeqState* first = AdmissionPolicy::Pick(waiting, cached);
  if (cached.size() != waiting.size()) return first;
  // Within the first's goal class and level, the longest cached prefix.
  const int level = programs_.Of(*first).level;
  SeqState* best = first;
  int best_cached = -1;
  for (size_t i = 0; i < waiting.size(); ++i) {
    SeqState* w = waiting[i];
    if (w->goal != first->goal || programs_.Of(*w).level != level) continue;
    if (cached[i] > best_cached || (cached[i] == best_cached && Before(*w, *best))) {
      best = w;
      best_cached = cached[i];
    }
  }
  return best;
}

void PlasPolicy::OnWaiting(const SeqState& s, std::span<SeqState* const> waiting) {
  if (s.preemptions == 0) programs_.Join(s);  // a preempted sequence joined when it came
}

void PlasPolicy::OnService(const SeqState& s, int prompt_tokens, int cached_tokens, int generated) {
  const double service = options_.prompt_weight * prompt_tokens +
                         options_.cached_weight * cached_tokens +
                         options_.generated_weight * generated;
  if (service != 0) programs_.Charge(s, service);
}

std::unique_ptr<AdmissionPolicy> MakeFcfsPolicy() { return std::make_unique<FcfsPolicy>(); }
std::unique_ptr<AdmissionPolicy> MakePriorityPolicy() { return std::make_unique<PriorityPolicy>(); }

std::unique_ptr<AdmissionPolicy> MakePolicy(const std::string& name,
                                            const FairnessOptions& fairness) {
  if (name == "fcfs") return MakeFcfsPolicy();
  if (name == "priority") return MakePriorityPolicy();
  if (name == "vtc") return std::make_unique<VtcPolicy>(fairness);
  if (name == "lpm") return std::make_unique<LpmPolicy>();
  if (name == "plas") return std::make_unique<PlasPolicy>(fairness);
  return nullptr;
}

}  // namespace braid
