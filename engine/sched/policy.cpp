#include "sched/policy.h"

namespace braid {
namespace {

class FcfsPolicy final : public AdmissionPolicy {
 public:
  const char* name() const override { return "fcfs"; }
  bool Before(const SeqState& a, const SeqState& b) const override {
    return a.arrival != b.arrival ? a.arrival < b.arrival : a.id < b.id;
  }
};

class PriorityPolicy final : public AdmissionPolicy {
 public:
  const char* name() const override { return "priority"; }
  bool Before(const SeqState& a, const SeqState& b) const override {
    if (a.goal != b.goal) return a.goal == GoalClass::kLatency;
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.deadline.has_value() != b.deadline.has_value()) return a.deadline.has_value();
    if (a.deadline && *a.deadline != *b.deadline) return *a.deadline < *b.deadline;
    return a.arrival != b.arrival ? a.arrival < b.arrival : a.id < b.id;
  }
};

}  // namespace

std::unique_ptr<AdmissionPolicy> MakeFcfsPolicy() { return std::make_unique<FcfsPolicy>(); }
std::unique_ptr<AdmissionPolicy> MakePriorityPolicy() { return std::make_unique<PriorityPolicy>(); }

std::unique_ptr<AdmissionPolicy> MakePolicy(const std::string& name) {
  if (name == "fcfs") return MakeFcfsPolicy();
  if (name == "priority") return MakePriorityPolicy();
  return nullptr;
}

}  // namespace braid
