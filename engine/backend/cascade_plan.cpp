#include "backend/cascade_plan.h"

#include <algorithm>
#include <climits>
#include <map>

namespace braid {

std::vector<PrefixGroup> FindPrefixGroups(std::span<const BatchSegment> batch, int bs, int gemm_min,
                                          int min_members, int min_keys) {
  std::map<int32_t, std::vector<CascadeMember>> by_first;
  int row = 0, dec = 0;
  for (int si = 0; si < static_cast<int>(batch.size()); ++si) {
    const BatchSegment& s = batch[si];
    if (s.n_tokens == 1 && s.pos0 >= bs) by_first[s.block_table[0]].push_back({si, dec, row});
    if (s.n_tokens < gemm_min) dec += s.n_tokens;
    row += s.n_tokens;
  }
  std::vector<PrefixGroup> groups;
  for (auto& [first, members] : by_first) {
    if (static_cast<int>(members.size()) < min_members) continue;
    int blocks = INT_MAX;
    for (const CascadeMember& m : members) blocks = std::min(blocks, batch[m.seg].pos0 / bs);
    const int32_t* table0 = batch[members[0].seg].block_table;
    int shared = 0;
    for (; shared < blocks; ++shared) {
      bool same = true;
      for (const CascadeMember& m : members)
        same &= batch[m.seg].block_table[shared] == table0[shared];
      if (!same) break;
    }
    if (shared * bs < min_keys) continue;
    groups.push_back({shared * bs, std::move(members)});
  }
  return groups;
}

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
