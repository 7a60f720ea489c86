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

double VtcPolicy::program_service(const std::string& program) const {
  const Account* a = Find(programs_, program);
  return a ? a->counter : 0.0;
}

const VtcPolicy::Account* VtcPolicy::Find(const std::unordered_map<std::string, Account>& accounts,
                                          const std::string& key) {
  auto it = accounts.find(key);
  return it == accounts.end() ? nullptr : &it->second;
}

int VtcPolicy::ProgramLevel(double service) const {
  if (options_.program_quantum <= 0) return 0;
  int level = 0;
  for (double edge = options_.program_quantum; service >= edge && level < 60; edge *= 2) ++level;
  return level;
}

bool VtcPolicy::Before(const SeqState& a, const SeqState& b) const {
  if (a.goal != b.goal) return a.goal == GoalClass::kLatency;
  if (a.client != b.client) {
    const double ca = counter(a.client), cb = counter(b.client);
    if (ca != cb) return ca < cb;
  } else if (a.program != b.program) {
    // Least attained service in levels, as multilevel feedback queues: a
    // program at a lower level first; at one level, the program that
    // started first (so that equal programs finish one after another
    // rather than all together at the end).
    const Account* pa = Find(programs_, a.program);
    const Account* pb = Find(programs_, b.program);
    const int la = ProgramLevel(pa ? pa->counter : 0), lb = ProgramLevel(pb ? pb->counter : 0);
    if (la != lb) return la < lb;
    const std::pair<double, RequestId> sa = pa ? pa->since : std::pair(a.arrival, a.id);
    const std::pair<double, RequestId> sb = pb ? pb->since : std::pair(b.arrival, b.id);
    if (sa != sb) return sa < sb;
  }
  return UrgencyBefore(a, b);
}

void VtcPolicy::OnWaiting(const SeqState& s, std::span<SeqState* const> waiting) {
  Account& a = accounts_[s.client];
  if (s.preemptions == 0) {  // new (a preempted sequence was counted when it came)
    ++a.live;
    auto [p, fresh] = programs_.try_emplace(s.program);
    if (fresh) p->second.since = {s.arrival, s.id};
    ++p->second.live;
  }
  double lowest = std::numeric_limits<double>::infinity();
  for (const SeqState* w : waiting) {
    if (w->client == s.client) return;  // its queue was not empty: no lift
    lowest = std::min(lowest, counter(w->client));
  }
  if (lowest != std::numeric_limits<double>::infinity()) a.counter = std::max(a.counter, lowest);
}

void VtcPolicy::Release(std::unordered_map<std::string, Account>& accounts,
                        const std::string& key) {
  auto it = accounts.find(key);
  if (it == accounts.end()) return;
  if (--it->second.live <= 0 && accounts.size() > kMaxIdleClients) accounts.erase(it);
}

void VtcPolicy::OnFinish(const SeqState& s) {
  Release(accounts_, s.client);
  Release(programs_, s.program);
}

void VtcPolicy::OnService(const SeqState& s, int prompt_tokens, int cached_tokens, int generated) {
  const double service = options_.prompt_weight * prompt_tokens +
                         options_.cached_weight * cached_tokens +
                         options_.generated_weight * generated;
  if (service == 0) return;
  accounts_[s.client].counter += service / weight(s.client);
  programs_[s.program].counter += service;
}

std::unique_ptr<AdmissionPolicy> MakeFcfsPolicy() { return std::make_unique<FcfsPolicy>(); }
std::unique_ptr<AdmissionPolicy> MakePriorityPolicy() { return std::make_unique<PriorityPolicy>(); }

std::unique_ptr<AdmissionPolicy> MakePolicy(const std::string& name,
                                            const FairnessOptions& fairness) {
  if (name == "fcfs") return MakeFcfsPolicy();
  if (name == "priority") return MakePriorityPolicy();
  if (name == "vtc") return std::make_unique<VtcPolicy>(fairness);
  return nullptr;
}

}  // namespace braid
