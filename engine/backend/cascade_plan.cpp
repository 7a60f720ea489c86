#include "backend/cascade_plan.h"

#include <algorithm>
#include <climits>

namespace braid {

CascadeWorkPlan PlanCascadeWork(std::span<const CascadeGroupShape> groups, int n_decode,
                                int graph_batch, const CascadeLimits& lim) {
  CascadeWorkPlan plan;
  if (groups.empty()) return plan;
  const int per = lim.rows_per_block;
  auto blocks_of = [&](int members) { return (members * lim.group + per - 1) / per; };
  int row_blocks = 0, min_keys = INT_MAX;
  for (const CascadeGroupShape& g : groups) {
    row_blocks += blocks_of(g.members);
    min_keys = std::min(min_keys, g.keys);
  }
  // A graphed step's bound: its tokens' rows in blocks, plus one partial
  // block per group it can hold.
  const int bound = graph_batch > 0 ? blocks_of(graph_batch) + graph_batch / lim.min_members : 0;
  const int fill = graph_batch > 0 ? blocks_of(graph_batch) : row_blocks;
  int P = lim.slots / std::max(1, fill * lim.n_kv);
  P = std::min({P, lim.max_ranges, graph_batch > 0 ? lim.min_keys / 16 : std::max(1, min_keys / 64),
                lim.range_pairs / std::max({1, n_decode, graph_batch}),
                lim.work_cap / std::max({1, row_blocks, bound})});
  plan.ranges = std::max(1, P);
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (int rb = 0; rb < blocks_of(groups[gi].members); ++rb)
      for (int r = 0; r < plan.ranges; ++r)
        plan.work.push_back(static_cast<int32_t>(gi) << 16 | rb << 4 | r);
  plan.work.resize(std::max(plan.work.size(), static_cast<size_t>(bound) * plan.ranges), -1);
  return plan;
}

}  // namespace braid
