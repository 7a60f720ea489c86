// Goal deduction: what a Want(var, goal) means for every node upstream of var.
//
//  1. Activation: every unfinished node upstream of var is marked wanted
//     (nodes nobody wants never run).
//  2. Goal class: a latency Want (or any Want with a deadline) makes every
//     such node latency-class; a throughput Want makes them throughput-class
//     unless an earlier Want already made them latency (latency is never
//     downgraded).
//  3. Task groups: for each consumer in that upstream set, its pending
//     producers that are not upstream of another of them form a group when
//     there are two or more (so members are mutually independent); a node
//     keeps the first group it was given. The dispatcher submits a group's
//     members in one pass, once all of them are ready.
//  4. Deadlines (critical-path method): with deadline D at time now,
//     T = now + D; tail(n) = max over n's consumers c in the set of
//     cost(c) + tail(c) (0 for var's producer); latest_finish(n) = T - tail(n);
//     latest_start(n) = latest_finish(n) - cost(n); slack = latest_start - now;
//     priority = PriorityForSlack(slack). A node keeps the tighter of an old
//     and a new latest finish. Group members share the group's least slack.
//     cost(n) = prompt_tokens / prefill_rate + max_tokens / decode_rate.
//
// Pure over the Dag: no clocks, engines or locks; the caller passes `now` and
// the cost of each node. docs/runtime.md works through examples.
#pragma once

#include <functional>

#include "graph/dag.h"

namespace braid::rt {

// Token-rate cost model (rates in tokens/s; 0 or less = unmeasured -> default).
struct CostModel {
  double prefill_tokens_per_s = 400;
  double decode_tokens_per_s = 100;
  double CostMs(double prompt_tokens, double max_tokens) const;
};

// Higher is more urgent: 100000 - slack in ms, clamped to [1, 1000000].
int PriorityForSlack(double slack_ms);

struct DeductionParams {
  double now_ms = 0;                              // the run's clock
  std::function<double(const DagNode&)> cost_ms;  // estimated cost of a node
  bool groups = true;                             // false in baseline mode
  bool goals = true;                              // false in baseline mode (all throughput)
  int* next_group = nullptr;                      // group id counter (run-wide)
};

// Applies the rules above for Want(target, options). Errors: unknown target
// (naming it), a cycle upstream (naming its nodes).
Status DeduceGoals(Dag& dag, VarId target, const GetOptions& options,
                   const DeductionParams& params);

}  // namespace braid::rt
