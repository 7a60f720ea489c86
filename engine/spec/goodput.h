// When to speculate: how many guesses each sequence of a step checks, from
// the measured acceptance of its guesses and the measured time of a step by
// its token count (goodput: expected tokens out per second of step).
//
// A sequence whose guesses hold with per-position rate a yields, for k
// guesses, 1 + a + ... + a^k tokens in expectation; the j-th guess adds a^j.
// A step of n plain tokens that samples D sequences and checks K guesses in
// all is worth (D + the chosen gains) / time(n + K); the chosen guesses are
// the K best gains over all sequences (each sequence's gains fall with j,
// so the best K are a prefix of each), and K is the one that maximizes that
// ratio, 0 when no K beats the plain step by 2%. Unmeasured step sizes are
// interpolated between measured ones, and beyond the largest measured
// extended along the slope from the smallest measured to it; no size costs
// less than a smaller one measured, a size not measured for 64 steps is
// forgotten (and so tried again), and a step grows at most to twice the
// guesses of the largest step measured so far. Pure arithmetic, one owner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace braid::spec {

// The moving per-position acceptance rate of one sequence's guesses.
class Acceptance {
 public:
  explicit Acceptance(double rate = 0.7) : rate_(rate) {}
  // After `proposed` guesses of which `accepted` (a prefix) were kept.
  void Observe(int proposed, int accepted);
  double rate() const { return rate_; }
  // Called when the sequence speculates not at all in a step; true every
  // 16th time, to check one guess anyway (a sequence that turns repetitive
  // is noticed).
  bool Probe();
  // Called when the sequence speculated.
  void Used() { idle_ = 0; }

 private:
  double rate_;  // optimistic until measured (0.7), unless told otherwise
  int idle_ = 0;
};

// Where a costly proposer's acceptance starts before anything is measured.
constexpr double kCostlyPrior = 0.3;

// Probes for a costly proposer (a draft model, whose every proposal first
// evaluates what the sequence produced since its last one), shared by the
// sequences of an engine: one probe per `interval` chances, the interval
// doubling up to 4096 after each checked proposal of which no guess held
// and halving down to 16 after one of which some held. A draft that seldom
// agrees with the target then stops costing its catch-up passes.
class ProbeSchedule {
 public:
  // A sequence that checks no guesses this step could probe: true when due.
  bool Due();
  // A costly proposal was checked and `accepted` of its guesses held.
  void Observe(int accepted);
  int interval() const { return interval_; }

 private:
  int interval_ = 16, idle_ = 0;
};

// Seconds per step, by tokens in the step (moving average per size).
class StepCost {
 public:
  explicit StepCost(int max_tokens)
      : seconds_(static_cast<size_t>(max_tokens) + 1, 0.0),
        estimate_(static_cast<size_t>(max_tokens) + 1, 0.0),
        at_(static_cast<size_t>(max_tokens) + 1, 0) {}
  // Observations after which a size not seen again is forgotten.
  static constexpr uint64_t kForget = 64;
  void Observe(int n_tokens, double seconds);
  // The estimate for a step of n tokens (0 when nothing was measured).
  double Seconds(int n) const {
    return estimate_[static_cast<size_t>(std::clamp(n, 1, max_tokens()))];
  }
  // The largest step size measured (0: none).
  int largest() const { return largest_; }
  int max_tokens() const { return static_cast<int>(seconds_.size()) - 1; }

 private:
  std::vector<double> seconds_;   // measured; 0: unmeasured
  std::vector<double> estimate_;  // every size's estimate, remade by Observe
  std::vector<uint64_t> at_;      // per size, the observation that last measured it
  std::vector<int> next_;         // Observe's scratch
  uint64_t observations_ = 0;
  int largest_ = 0;
};

struct Candidate {
  double acceptance = 0;  // its Acceptance::rate()
  int available = 0;      // guesses its proposer offers
};

// Whether one guess that surely holds would pay in a step of `base_tokens`
// plain tokens of which `sampling` sequences sample: where it would not,
// probing a sequence's acceptance is wasted work.
bool GuessCouldPay(const StepCost& cost, int base_tokens, int sampling);

// How many guesses are worth proposing to a sequence whose guesses hold at
// `acceptance`, when proposing costs (a draft model's passes): those that
// hold with a chance of 1 in 10 or more, at most max_tokens, at least one.
int UsefulGuesses(double acceptance, int max_tokens);

// Guesses per candidate for a step of `base_tokens` plain tokens of which
// `sampling` sequences sample (the candidates among them).
std::vector<int> ChooseGuesses(const StepCost& cost, int base_tokens, int sampling,
                               std::span<const Candidate> candidates);

}  // namespace braid::spec
