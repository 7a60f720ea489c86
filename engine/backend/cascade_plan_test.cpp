// PlanCascadeWork: every (group, row block, range) once, and a graphed
// step's plan shaped by its batch size alone.
#include "backend/cascade_plan.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace braid {
namespace {

CascadeLimits Limits(int group, int rows_per_block) {
  CascadeLimits l;
  l.rows_per_block = rows_per_block;
  l.group = group;
  l.n_kv = 8;
  l.slots = 264;
  return l;
}

// Every group's row blocks times every range exactly once, then only idle units.
void CheckCovers(const CascadeWorkPlan& plan, const std::vector<CascadeGroupShape>& groups,
                 const CascadeLimits& l) {
  std::set<std::tuple<int, int, int>> want, got;
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (int rb = 0; rb * l.rows_per_block < groups[gi].members * l.group; ++rb)
      for (int r = 0; r < plan.ranges; ++r) want.insert({static_cast<int>(gi), rb, r});
  bool idle = false;
  for (int32_t u : plan.work) {
    if (u < 0) {
      idle = true;
      continue;
    }
    REQUIRE_FALSE(idle);  // idle units only after the real ones
    REQUIRE(got.insert({u >> 16, (u >> 4) & 0xfff, u & 0xf}).second);
  }
  CHECK(got == want);
}

TEST_CASE("cascade work: each group's row blocks over every range, once") {
  const CascadeLimits l = Limits(4, 64);
  // 64 members of 4 query heads: 4 row blocks of 64 rows; 8 KV heads fill
  // 264 slots with 8 ranges (one wave).
  const std::vector<CascadeGroupShape> one = {{64, 4096}};
  const CascadeWorkPlan p = PlanCascadeWork(one, 64, 0, l);
  CHECK(p.ranges == 8);
  CHECK(p.work.size() == 32);
  CheckCovers(p, one, l);
  // A short prefix keeps at least 4 tiles of 16 keys per range.
  const std::vector<CascadeGroupShape> short_prefix = {{4, 256}, {5, 300}};
  const CascadeWorkPlan q = PlanCascadeWork(short_prefix, 9, 0, l);
  CHECK(q.ranges == 4);
  CheckCovers(q, short_prefix, l);
  CHECK(PlanCascadeWork({}, 0, 0, l).work.empty());
}

TEST_CASE("cascade work: a graphed step's plan depends on its batch size alone") {
  std::mt19937 rng(3);
  for (int group : {1, 4, 8})
    for (int rows : {64, 128})
      for (int batch : {4, 8, 16, 64, 96, 256}) {
        const CascadeLimits l = Limits(group, rows);
        int ranges = -1;
        size_t units = 0;
        for (int trial = 0; trial < 200; ++trial) {
          // Groups of at least min_members members, together at most the batch.
          std::vector<CascadeGroupShape> groups;
          int left = batch;
          while (left >= l.min_members && (groups.empty() || rng() % 3 != 0)) {
            const int m = l.min_members + static_cast<int>(rng() % (left - l.min_members + 1));
            groups.push_back({m, l.min_keys + static_cast<int>(rng() % 4096)});
            left -= m;
          }
          const CascadeWorkPlan p = PlanCascadeWork(groups, batch - left, batch, l);
          CAPTURE(group);
          CAPTURE(rows);
          CAPTURE(batch);
          CAPTURE(groups.size());
          if (ranges < 0) ranges = p.ranges, units = p.work.size();
          CHECK(p.ranges == ranges);
          CHECK(p.work.size() == units);  // the captured grid: never more
          CHECK(p.ranges >= 1);
          CHECK(p.ranges <= l.max_ranges);
          CHECK(p.ranges * batch <= l.range_pairs);
          CheckCovers(p, groups, l);
        }
      }
}

}  // namespace
}  // namespace braid
