// FindPrefixGroups: the groups a batch's block tables give; PlanCascadeWork:
// every (group, row block, range) once, and a graphed step's plan shaped by
// its batch size alone.
#include "backend/cascade_plan.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace braid {
namespace {

TEST_CASE("prefix groups: decode tokens whose tables start alike, over whole blocks before them") {
  std::mt19937 rng(9);
  const int bs = 16, min_members = 4, min_keys = 64, gemm_min = 16;
  int formed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    // Three families of sequences, each with a shared run of blocks; a
    // member diverges after a random part of it (a nested or shorter share).
    std::vector<std::vector<int32_t>> tables;
    std::vector<BatchSegment> batch;
    std::vector<int32_t> token(1, 7), chunk(20, 7);
    int next_block = 0;
    std::vector<std::vector<int32_t>> family(3);
    for (auto& f : family)
      for (int b = 0, n = 2 + static_cast<int>(rng() % 10); b < n; ++b) f.push_back(next_block++);
    const int n_seqs = 8 + static_cast<int>(rng() % 24);
    tables.reserve(n_seqs);
    for (int i = 0; i < n_seqs; ++i) {
      const auto& f = family[rng() % 3];
      const int cut = static_cast<int>(rng() % 4);  // usually the whole run, or nearly
      std::vector<int32_t> t(f.begin(),
                             f.end() - std::min<int>(cut, static_cast<int>(f.size()) - 1));
      for (int b = 0, n = 1 + static_cast<int>(rng() % 3); b < n; ++b) t.push_back(next_block++);
      tables.push_back(std::move(t));
      BatchSegment s;
      s.block_table = tables.back().data();
      const int blocks = static_cast<int>(tables.back().size());
      const int kind = static_cast<int>(rng() % 6);  // mostly decode tokens
      s.n_tokens = kind == 0 ? 20 : kind == 1 ? 5 : 1;
      s.tokens = s.n_tokens == 20 ? chunk.data() : token.data();
      s.pos0 = std::max(0, blocks * bs - s.n_tokens - static_cast<int>(rng() % bs));
      batch.push_back(s);
    }
    const std::vector<PrefixGroup> groups =
        FindPrefixGroups(batch, bs, gemm_min, min_members, min_keys);
    // Decode indices and rows as the backend lays the batch out.
    std::vector<int> dec(batch.size()), row(batch.size());
    for (size_t i = 0, d = 0, r = 0; i < batch.size(); ++i) {
      dec[i] = static_cast<int>(d), row[i] = static_cast<int>(r);
      d += batch[i].n_tokens < gemm_min ? batch[i].n_tokens : 0;
      r += batch[i].n_tokens;
    }
    std::set<int32_t> firsts;
    formed += static_cast<int>(groups.size());
    for (const PrefixGroup& g : groups) {
      CAPTURE(trial);
      REQUIRE(static_cast<int>(g.members.size()) >= min_members);
      CHECK(g.keys >= min_keys);
      CHECK(g.keys % bs == 0);
      const int shared = g.keys / bs;
      const int32_t* t0 = batch[g.members[0].seg].block_table;
      int least = 1 << 30;
      bool diverges = false;
      for (const CascadeMember& m : g.members) {
        const BatchSegment& s = batch[m.seg];
        CHECK(s.n_tokens == 1);
        CHECK(m.dec == dec[m.seg]);
        CHECK(m.row == row[m.seg]);
        CHECK(shared <= s.pos0 / bs);  // whole blocks before its position
        least = std::min(least, s.pos0 / bs);
        for (int b = 0; b < shared; ++b) CHECK(s.block_table[b] == t0[b]);
        diverges |= shared < s.pos0 / bs && s.block_table[shared] != t0[shared];
      }
      CHECK((shared == least || diverges));  // the longest run they share
      CHECK(firsts.insert(t0[0]).second);
      // Every decode token past its first block that starts with that block is in.
      int with_first = 0;
      for (const BatchSegment& s : batch)
        with_first += s.n_tokens == 1 && s.pos0 >= bs && s.block_table[0] == t0[0];
      CHECK(with_first == static_cast<int>(g.members.size()));
    }
  }
  MESSAGE("groups formed: " << formed);
  CHECK(formed > 100);  // the batches do form groups
}

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
