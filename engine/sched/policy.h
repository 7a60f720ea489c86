// Admission and preemption order of the step scheduler, and the accounts a
// policy keeps of the work it orders: the seam where FCFS, priority and fair
// sharing (VTC) plug in. A policy orders and hears what happens; the
// scheduler decides what fits.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <unordered_map>

#include "engine/engine.h"
#include "sched/sequence.h"

namespace braid {

class AdmissionPolicy {
 public:
  virtual ~AdmissionPolicy() = default;
  virtual const char* name() const = 0;
  // True when `a` should be admitted (and keep running) before `b`, as far
  // as the policy knows now. The scheduler picks the first waiting sequence
  // in this order at each admission, so a policy whose accounts move with
  // the service it hears reorders the queue as a step is planned.
  virtual bool Before(const SeqState& a, const SeqState& b) const = 0;
  // Which running request to preempt first when KV runs out: the one that
  // comes last in admission order.
  bool PreemptBefore(const SeqState& a, const SeqState& b) const { return Before(b, a); }
  // `s` joins the waiting queue (new, or preempted); `waiting` is the queue
  // before it joins.
  virtual void OnWaiting(const SeqState& s, std::span<SeqState* const> waiting) {}
  // The step being planned gives `s` work: `prompt_tokens` prompt positions
  // computed for the first time (recomputed ones are free), `cached_tokens`
  // prompt positions found in the prefix cache and not charged before, and
  // `generated` new tokens; negative counts refund work planned and then
  // taken back (its sequence preempted in the same step).
  virtual void OnService(const SeqState& s, int prompt_tokens, int cached_tokens, int generated) {}
  // `s` leaves for good (finished or cancelled).
  virtual void OnFinish(const SeqState& s) {}
  // The policy's account of a client, for stats (the vtc counter; 0 for
  // policies without accounts).
  virtual double counter(const std::string& client) const { return 0; }
  // Whether Pick wants each waiting sequence's cached prefix length.
  virtual bool uses_cached() const { return false; }
  // The waiting sequence to admit next (`waiting` non-empty); `cached`:
  // each one's tokens found in the prefix cache, when uses_cached(). The
  // first in Before order unless the policy trades order for locality.
  virtual SeqState* Pick(std::span<SeqState* const> waiting, std::span<const int> cached) const;
};

// Arrival order only.
std::unique_ptr<AdmissionPolicy> MakeFcfsPolicy();
// Latency class first, then higher priority, then earlier deadline, then arrival.
std::unique_ptr<AdmissionPolicy> MakePriorityPolicy();

// VTC: latency class first (fairness within a class); then the client whose
// counter (service / weight) is lowest; within a client, the program
// (SeqState::program) that has received the least service so far, in
// levels that double from FairnessOptions::program_quantum, and at one
// level the program that started first (so that one long agent loop does
// not starve the client's short programs, and equal programs finish one
// after another); then priority, deadline, arrival as the priority policy. A client whose queue was
// empty joins at no less than the lowest counter of the clients waiting (the lift rule), so a
// client back from idle cannot claim the service it did not ask for.
class VtcPolicy final : public AdmissionPolicy {
 public:
  explicit VtcPolicy(FairnessOptions options) : options_(std::move(options)) {}
  const char* name() const override { return "vtc"; }
  bool Before(const SeqState& a, const SeqState& b) const override;
  void OnWaiting(const SeqState& s, std::span<SeqState* const> waiting) override;
  void OnService(const SeqState& s, int prompt_tokens, int cached_tokens, int generated) override;
  void OnFinish(const SeqState& s) override;
  // With a locality bound: among the waiting sequences of the first goal
  // class whose clients' counters are within the bound of the lowest, the
  // one with the longest cached prefix.
  bool uses_cached() const override { return options_.locality_bound > 0; }
  SeqState* Pick(std::span<SeqState* const> waiting, std::span<const int> cached) const override;
  // A client's counter (0 for one never seen).
  double counter(const std::string& client) const override;
  double weight(const std::string& client) const;
  // Clients with an account. Past kMaxIdleClients, the account of a client
  // whose last request leaves is dropped (it returns at the lift, or 0),
  // so that one-off clients (every local run is a client of its own) do not
  // pile up in a long-lived server.
  size_t clients() const { return accounts_.size(); }
  // A program's service so far (0 for one never seen).
  double program_service(const std::string& program) const;
  static constexpr size_t kMaxIdleClients = 4096;

 private:
  struct Account {
    double counter = 0;
    int live = 0;                        // sequences queued or running
    std::pair<double, RequestId> since;  // programs: the arrival and id of the first call
  };
  static const Account* Find(const std::unordered_map<std::string, Account>& accounts,
                             const std::string& key);
  // 0 below one quantum of service, then one level per doubling.
  int ProgramLevel(double service) const;
  // Drops an idle account once there are more than kMaxIdleClients.
  static void Release(std::unordered_map<std::string, Account>& accounts, const std::string& key);
  FairnessOptions options_;
  std::unordered_map<std::string, Account> accounts_;  // per client
  std::unordered_map<std::string, Account> programs_;  // per program: service so far, unweighted
};

// "fcfs", "priority" or "vtc" (with `fairness`); nullptr for an unknown name.
std::unique_ptr<AdmissionPolicy> MakePolicy(const std::string& name,
                                            const FairnessOptions& fairness = {});

}  // namespace braid
