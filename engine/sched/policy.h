// Admission order of waiting requests: the seam where FCFS, priority and
// (later) fair-share policies plug in. A policy only orders; the scheduler
// decides what fits.
#pragma once

#include <memory>
#include <string>

#include "sched/sequence.h"

namespace braid {

class AdmissionPolicy {
 public:
  virtual ~AdmissionPolicy() = default;
  virtual const char* name() const = 0;
  // True when `a` should be admitted before `b`.
  virtual bool Before(const SeqState& a, const SeqState& b) const = 0;
  // Which running request to preempt first when KV runs out: the one that
  // comes last in admission order.
  bool PreemptBefore(const SeqState& a, const SeqState& b) const { return Before(b, a); }
};

// Arrival order only.
std::unique_ptr<AdmissionPolicy> MakeFcfsPolicy();
// Latency class first, then higher priority, then earlier deadline, then arrival.
std::unique_ptr<AdmissionPolicy> MakePriorityPolicy();
// "fcfs" or "priority"; nullptr for an unknown name.
std::unique_ptr<AdmissionPolicy> MakePolicy(const std::string& name);

}  // namespace braid
