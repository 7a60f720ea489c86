// The placer's choices: affinity within the load slack, goal fit for
// latency requests, least-loaded and round-robin.
#include "runtime/placement.h"

#include <doctest/doctest.h>

#include <vector>

namespace braid::rt {
namespace {

using C = PlacementCandidate;

int Choose(Placement p, const std::vector<C>& c, bool latency = false) {
  return Placer(p).Choose(c, latency);
}

TEST_CASE("ParsePlacement: the three names, and an error naming them") {
  CHECK(ParsePlacement("affinity").value() == Placement::kAffinity);
  CHECK(ParsePlacement("least-loaded").value() == Placement::kLeastLoaded);
  CHECK(ParsePlacement("round-robin").value() == Placement::kRoundRobin);
  for (Placement p : {Placement::kAffinity, Placement::kLeastLoaded, Placement::kRoundRobin})
    CHECK(ParsePlacement(PlacementName(p)).value() == p);
  auto bad = ParsePlacement("random");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "unknown placement 'random' (affinity, least-loaded or round-robin)");
}

TEST_CASE("Placer: affinity takes the cached prefix while its engine is within the slack") {
  const Placement a = Placement::kAffinity;
  CHECK(Choose(a, {}) == -1);
  CHECK(Choose(a, {{0, 0, 0}, {500, 2, 0}}) == 1);  // 2 ahead: within the slack of 2
  CHECK(Choose(a, {{0, 0, 0}, {500, 3, 0}}) == 0);  // 3 ahead: spill to the idle engine
  // The slack grows with the load: a quarter of the least load.
  CHECK(Placer::Slack(0) == 2);
  CHECK(Placer::Slack(20) == 5);
  CHECK(Choose(a, {{0, 20, 0}, {500, 25, 0}}) == 1);
  CHECK(Choose(a, {{0, 20, 0}, {500, 26, 0}}) == 0);
  // The longest prefix among those within the slack; then the least load; then the first.
  CHECK(Choose(a, {{100, 1, 0}, {300, 2, 0}, {900, 9, 0}}) == 1);
  CHECK(Choose(a, {{300, 2, 0}, {300, 1, 0}}) == 1);
  CHECK(Choose(a, {{300, 1, 0}, {300, 1, 0}}) == 0);
  CHECK(Choose(a, {{0, 4, 0}, {0, 1, 0}, {0, 1, 0}}) == 1);
  // A short match (a chat template's header) is no reason to go anywhere.
  CHECK(Choose(a, {{Placer::kMinAffinityTokens - 1, 1, 0}, {0, 0, 0}}) == 1);
  CHECK(Choose(a, {{Placer::kMinAffinityTokens, 1, 0}, {0, 0, 0}}) == 0);
}

TEST_CASE("Placer: equals take turns, so that new prefixes spread over idle engines") {
  Placer p;
  const std::vector<C> idle = {{10, 0, 0}, {5, 0, 0}, {0, 3, 0}};
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) order.push_back(p.Choose(idle, false));
  CHECK(order == std::vector<int>{0, 1, 0, 1});
}

TEST_CASE("Placer: a latency request skips engines where it would queue") {
  const Placement a = Placement::kAffinity;
  const std::vector<C> c = {{500, 3, 1}, {0, 2, 0}};
  CHECK(Choose(a, c, false) == 0);  // throughput: the prefix, 1 ahead
  CHECK(Choose(a, c, true) == 1);   // latency: runs at once on engine 1
  // Everywhere it would queue: the rule does not apply.
  CHECK(Choose(a, {{500, 3, 1}, {0, 2, 1}}, true) == 0);
  CHECK(Choose(Placement::kLeastLoaded, {{0, 1, 1}, {0, 2, 0}}, true) == 1);
}

TEST_CASE("Placer: least-loaded ignores prefixes; round-robin takes the engines in turn") {
  CHECK(Choose(Placement::kLeastLoaded, {{900, 2, 0}, {0, 1, 0}}) == 1);
  Placer rr(Placement::kRoundRobin);
  CHECK_FALSE(rr.wants_prefix());
  const std::vector<C> three(3);
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) order.push_back(rr.Choose(three, false));
  CHECK(order == std::vector<int>{0, 1, 2, 0, 1});
  CHECK(Placer().wants_prefix());
}

}  // namespace
}  // namespace braid::rt
