// How many tokens a step may hold so that it takes at most a target time,
// learned from measured step times (EngineOptions::step_ms): the sequences
// decoding then see inter-token times near the target while prompts are
// computed beside them in chunks. Decodes are never held back; the cap
// limits the prompt chunks added to a step (Scheduler::Schedule), which
// always get at least one granule so that prompts progress.
//
// Step time by size is kept as a moving average per bucket of `granule`
// tokens. The cap is the largest bucket whose average is within the
// target, growing one bucket at a time into sizes not yet measured and
// stopping at the first measured over it; every `probe_steps` steps
// without a step above the cap, the bucket above is tried again (what a
// size costs moves with the batch's contexts). Pure arithmetic; the step
// loop owns it.
#pragma once

#include <vector>

namespace braid {

class StepBudget {
 public:
  StepBudget(int max_tokens, double target_ms, int granule = 16, int probe_steps = 64);

  // A step of n tokens took `ms`.
  void Observe(int n, double ms);
  // The most tokens the next step should hold: a multiple of the granule
  // in [granule, max_tokens].
  int Cap() const;
  int granule() const { return granule_; }
  // The average of the steps measured in n's bucket (-1 if none).
  double StepMs(int n) const;

 private:
  int Bucket(int n) const { return (n + granule_ - 1) / granule_; }
  // The last bucket of the run from the first whose averages are all within
  // the target (0: none); *unmeasured: whether the next was never measured.
  int Within(bool* unmeasured) const;

  int max_tokens_;
  double target_ms_;
  int granule_;
  int probe_steps_;
  int since_probe_ = 0;      // steps since one above the cap
  std::vector<double> avg_;  // by bucket b (steps of (b - 1) * granule + 1 .. b * granule)
};

}  // namespace braid
