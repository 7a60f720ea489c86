// The placer's choices: affinity within the load slack, goal fit for
// latency requests, least-loaded and round-robin; and the placement service
// over engines, as the runtime's dispatcher and the OpenAI-compatible API
// call it.
#include "runtime/placement.h"

#include <doctest/doctest.h>

#include <vector>

#include "testing/fakes.h"

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

// Three fake engines; the third has cached a 96-token prompt.
struct Engines {
  testing::FakeEngine a, b, c;
  std::vector<int32_t> prompt = std::vector<int32_t>(96, 'x');
  Engines() {
    GenerationRequest r;
    r.prompt = prompt;
    REQUIRE(c.Submit(r, nullptr).ok());
    REQUIRE(c.ProbePrefix(prompt, 0) == 96);
  }
  std::vector<PlacementEngine> All() { return PlacementEngines({&a, &b, &c}, {"a", "b", "c"}); }
};

TEST_CASE("EnginePlacement: the cached prefix, among engines that can take the request") {
  Engines e;
  e.b.remote = true;
  EnginePlacement p(e.All(), Placement::kAffinity);
  CHECK(p.engine(1).name == "b");
  CHECK_FALSE(p.engine(1).local);
  // By load only: the first of the idle engines (equals then take turns).
  PlacementNeeds by_load;
  by_load.prefer_prefix = false;
  CHECK(EnginePlacement(e.All(), Placement::kAffinity).Pick(e.prompt, by_load) == 0);
  CHECK(p.Pick(e.prompt, {}) == 2);
  // A dead engine is skipped; a remote one only when the request needs the model.
  e.c.dead = true;
  e.a.fake_stats.running = 3;
  CHECK(p.Pick(e.prompt, {}) == 1);
  PlacementNeeds local;
  local.needs_local = true;
  CHECK(p.Pick(e.prompt, local) == 0);
  CHECK_FALSE(p.CanTake(1, true));
  CHECK_FALSE(p.CanTake(2, false));
  CHECK_FALSE(p.CanTake(3, false));
  CHECK_FALSE(p.CanTake(-1, false));
  e.a.dead = true;
  CHECK(p.Pick(e.prompt, local) == -1);
  CHECK(p.NoEngineReason(true) ==
        "no engine can take it (select and regex outputs need an engine that runs its model in "
        "this process): a is not alive, b is remote, c is not alive");
  CHECK(p.NoEngineReason(false) ==
        "no engine can take it: a is not alive, b is available, c is "
        "not alive");
}

TEST_CASE("EnginePlacement: a load is the engine's, or the caller's in-flight count when higher") {
  Engines e;
  EnginePlacement p(e.All(), Placement::kAffinity);
  e.c.fake_stats.running = 1;
  e.c.fake_stats.waiting = 1;
  CHECK(p.Pick(e.prompt, {}) == 2);  // 2 ahead of the idle engines: within the slack
  p.engine(2).in_flight->store(3);
  CHECK(p.Pick(e.prompt, {}) != 2);  // 3 ahead: spill over
  p.engine(2).in_flight->store(0);
  CHECK(p.Pick(e.prompt, {}) == 2);
}

TEST_CASE(
    "EnginePlacement: the OpenAI-compatible API's request: a client's salt, the latency goal") {
  Engines e;
  // Engines built from the API's options: unnamed, local when they run a model.
  e.b.remote = true;
  EnginePlacement p(PlacementEngines({&e.a, &e.b, &e.c}), Placement::kAffinity);
  CHECK(p.engine(0).name == "engine0");
  CHECK(p.engine(2).name == "engine2");
  CHECK_FALSE(p.engine(1).local);
  PlacementNeeds api;
  api.salt = 7;
  api.latency = true;
  CHECK(p.Pick(e.prompt, api) == 2);
  // A latency request skips the engine where it would queue while another runs it at once.
  e.c.fake_stats.running = 1;
  e.c.fake_stats.waiting = 1;
  CHECK(p.Pick(e.prompt, api) != 2);
  api.latency = false;
  CHECK(p.Pick(e.prompt, api) == 2);
  // A response_format constraint (a logits mask) needs a local engine.
  api.needs_local = true;
  e.c.dead = true;
  e.a.fake_stats.running = 4;
  CHECK(p.Pick(e.prompt, api) == 0);
}

TEST_CASE("EnginePlacement: round-robin over the engines that can take the request") {
  Engines e;
  EnginePlacement p(e.All(), Placement::kRoundRobin);
  e.b.dead = true;
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) order.push_back(p.Pick(e.prompt, {}));
  CHECK(order == std::vector<int>{0, 2, 0, 2});
}

}  // namespace
}  // namespace braid::rt
