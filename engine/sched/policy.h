// Admission and preemption order of the step scheduler, and the accounts a
// policy keeps of the work it orders: the seam where FCFS, priority, fair
// sharing (VTC), longest prefix match and program-level least attained
// service plug in. A policy orders and hears what happens; the
// scheduler decides what fits.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

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

// The service each program (SeqState::program, a DAG run's calls) has
// attained so far, unweighted, in levels: the account behind least attained
// service between programs (Autellix), which vtc applies to the programs of
// one client and plas to all the programs of the engine. Level 0 below
// `quantum` of service, then one level per doubling (multilevel feedback
// queues); at one level, the program that started first (its first call's
// arrival, then id) goes first, so that equal programs finish one after
// another rather than all together at the end.
class ProgramAccounts {
 public:
  // `own_program`: a sequence without a program is a program of its own
  // (plas); otherwise such sequences share the program "" (vtc, where they
  // are the rest of their client's work).
  ProgramAccounts(double quantum, bool own_program) : quantum_(quantum), own_(own_program) {}
  // A new sequence (not a preempted one coming back): its program's account
  // opens at 0, started by it, unless it is open already.
  void Join(const SeqState& s);
  void Charge(const SeqState& s, double service);
  // `s` leaves for good. The account of a program left without sequences
  // stays while it may have more calls to come (an agent between calls),
  // but past kMaxIdle accounts it is dropped as its last sequence leaves, so
  // that a long-lived server does not keep every program it ever saw; a
  // program that comes back after that starts again at 0. A program of its
  // own (no program, under own_program) is dropped at once: nothing can
  // join it.
  void Leave(const SeqState& s);
  struct Standing {
    int level = 0;
    std::pair<double, RequestId> since;  // arrival and id of the program's first call
  };
  // Where s's program stands now (level 0, started by s, for one never seen).
  Standing Of(const SeqState& s) const;
  // Whether `a` and `b` are calls of one program.
  bool Same(const SeqState& a, const SeqState& b) const;
  // A named program's service so far (0 for one never seen or dropped).
  double service(const std::string& program) const;
  // Open accounts.
  size_t size() const { return accounts_.size(); }
  // 0 below one quantum of service, then one level per doubling.
  int Level(double service) const;
  static constexpr size_t kMaxIdle = 4096;

 private:
  struct Key {
    std::string program;
    bool own = false;  // a program of its own: the sequence `id`
    RequestId id = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Account {
    double service = 0;
    int live = 0;  // sequences queued or running
    std::pair<double, RequestId> since;
  };
  Key KeyOf(const SeqState& s) const;
  double quantum_;
  bool own_;
  std::unordered_map<Key, Account, KeyHash> accounts_;
};

// VTC: latency class first (fairness within a class); then the client whose
// counter (service / weight) is lowest; within a client, the program that
// has received the least service so far (ProgramAccounts, with
// FairnessOptions::program_quantum; so that one long agent loop does not
// starve the client's short programs); then priority, deadline, arrival as
// the priority policy. A client whose queue was empty joins at no less than
// the lowest counter of the clients waiting (the lift rule), so a client
// back from idle cannot claim the service it did not ask for.
class VtcPolicy final : public AdmissionPolicy {
 public:
  explicit VtcPolicy(FairnessOptions options)
      : options_(std::move(options)), programs_(options_.program_quantum, false) {}
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
  double program_service(const std::string& program) const { return programs_.service(program); }
  static constexpr size_t kMaxIdleClients = 4096;

 private:
  struct Account {
    double counter = 0;
    int live = 0;  // sequences queued or running
  };
  FairnessOptions options_;
  std::unordered_map<std::string, Account> accounts_;  // per client
  ProgramAccounts programs_;
};

// Longest prefix match, as SGLang's default schedule policy ("lpm"), which
// sorts its waiting queue by the length of each request's prefix found in
// the radix cache so that requests sharing a cached prefix run while it is
// resident. Pick admits the waiting sequence with the longest cached
// prefix, ties in arrival order; Before (the preemption order, and Pick's
// order without cached lengths) is arrival order, as fcfs. Goal classes,
// priorities and deadlines are not looked at. Left out of SGLang's: its
// fall back to FCFS when the waiting queue is long (over 128 requests, where
// matching each one costs too much; here each waiting prompt is probed once
// a step whatever the queue's length), its in-batch prefix caching (of the
// waiting requests that share a prefix not yet cached, one goes first and
// the others wait for it to be cached; the runtime's co-scheduling of
// calls that share a prefix does that one level up), and its DFS-weight
// policy (the radix tree walked depth first, subtrees weighted by their
// waiting requests).
class LpmPolicy final : public AdmissionPolicy {
 public:
  const char* name() const override { return "lpm"; }
  bool Before(const SeqState& a, const SeqState& b) const override;
  bool uses_cached() const override { return true; }
  SeqState* Pick(std::span<SeqState* const> waiting, std::span<const int> cached) const override;
};

// Program-level least attained service (PLAS; Autellix, Luo et al. 2025,
// arXiv 2502.13965) across all the programs of the engine: a call's
// priority is the service its program (SeqState::program; none: the call is
// a program of its own) has attained so far, so that short programs are not
// stuck behind long agent loops whatever the order their calls arrive in.
// Order: latency class first (Braid's goals); then the program's level of
// attained service (ProgramAccounts with FairnessOptions::program_quantum);
// within a level a call with a deadline before one without, the earlier
// deadline first (its slack runs out first); then the program that started
// first; then arrival and id. Admission (Pick) takes, among the waiting
// calls of the first one's goal class and level, the one with the longest
// cached prefix (ties in that order): at one level of service a program
// whose context is resident goes before one that would evict it, as SGLang's
// lpm does for all calls. Priority is not looked at. Service is counted
// as vtc counts it (the FairnessOptions weights, not divided by client
// weights; clients are not looked at either).
//
// A running call whose program climbs a level is not preempted for that:
// waiting calls are admitted into free KV only, and when KV runs out the
// running call last in this order (as of the step's start) yields, is
// recomputed without charge and comes back at its program's level. Left
// out of Autellix: its anti-starvation rule (a call that waited long
// relative to its service moves to the first level), service measured in
// execution time rather than tokens, the critical path of a program's DAG
// (ATLAS), and its locality-aware load balancing between engines.
class PlasPolicy final : public AdmissionPolicy {
 public:
  explicit PlasPolicy(FairnessOptions options)
      : options_(std::move(options)), programs_(options_.program_quantum, true) {}
  const char* name() const override { return "plas"; }
  bool Before(const SeqState& a, const SeqState& b) const override;
  bool uses_cached() const override { return true; }
  SeqState* Pick(std::span<SeqState* const> waiting, std::span<const int> cached) const override;
  void OnWaiting(const SeqState& s, std::span<SeqState* const> waiting) override;
  void OnService(const SeqState& s, int prompt_tokens, int cached_tokens, int generated) override;
  void OnFinish(const SeqState& s) override { programs_.Leave(s); }
  // A named program's service so far (0 for one never seen or dropped).
  double program_service(const std::string& program) const { return programs_.service(program); }
  // Programs with an account (bounded as ProgramAccounts::Leave says).
  size_t programs() const { return programs_.size(); }

 private:
  FairnessOptions options_;
  ProgramAccounts programs_;
};

// "fcfs", "priority", "vtc" (with `fairness`), "lpm" or "plas" (with
// `fairness`'s weights and program quantum); nullptr for an unknown name.
std::unique_ptr<AdmissionPolicy> MakePolicy(const std::string& name,
                                            const FairnessOptions& fairness = {});

}  // namespace braid
