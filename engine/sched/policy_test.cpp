// The lpm and plas admission policies on their own: the order they give and
// the accounts they keep (through the scheduler: scheduler_test.cpp).
#include "sched/policy.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace braid {
namespace {

SeqState Seq(RequestId id, double arrival, const std::string& program = "") {
  SeqState s;
  s.id = id;
  s.arrival = arrival;
  s.program = program;
  return s;
}

TEST_CASE("MakePolicy knows lpm and plas") {
  for (const char* name : {"fcfs", "priority", "vtc", "lpm", "plas"}) {
    CAPTURE(name);
    auto p = MakePolicy(name);
    REQUIRE(p != nullptr);
    CHECK(std::string(p->name()) == name);
  }
  CHECK(MakePolicy("lpm")->uses_cached());
  CHECK(MakePolicy("plas")->uses_cached());
  CHECK_FALSE(MakePolicy("fcfs")->uses_cached());
  CHECK(MakePolicy("sjf") == nullptr);
}

TEST_CASE("lpm: the longest cached prefix first, ties in arrival order") {
  auto lpm = MakePolicy("lpm");
  SeqState a = Seq(1, 1), b = Seq(2, 2), c = Seq(3, 3), d = Seq(4, 4);
  // Queued out of arrival order, so that position breaks no tie.
  std::vector<SeqState*> waiting = {&d, &c, &b, &a};
  CHECK(lpm->Pick(waiting, std::vector<int>{0, 48, 16, 32}) == &c);
  // c and b tie at 48: b arrived first.
  CHECK(lpm->Pick(waiting, std::vector<int>{0, 48, 48, 32}) == &b);
  // Arrival, then id, among equal arrivals.
  SeqState e = Seq(5, 2);
  waiting = {&e, &b};
  CHECK(lpm->Pick(waiting, std::vector<int>{16, 16}) == &b);
  // Nothing cached, or no cached lengths: first come, first served; and the
  // order (for preemption) is arrival order whatever the goal class.
  waiting = {&d, &c, &b, &a};
  CHECK(lpm->Pick(waiting, std::vector<int>{0, 0, 0, 0}) == &a);
  CHECK(lpm->Pick(waiting, {}) == &a);
  d.goal = GoalClass::kLatency;
  d.priority = 9;
  CHECK(lpm->Before(a, d));
  CHECK(lpm->Pick(waiting, {}) == &a);
}

TEST_CASE("plas: a program with more attained service goes after a new program") {
  PlasPolicy p({});  // program quantum 256
  SeqState old_call = Seq(1, 1, "old");
  p.OnWaiting(old_call, {});
  p.OnService(old_call, 300, 0, 100);  // 300 * 1 + 100 * 2: level 1
  CHECK(p.program_service("old") == doctest::Approx(500));
  SeqState next_old = Seq(2, 2, "old"), fresh = Seq(3, 3, "new");
  p.OnWaiting(next_old, {});
  p.OnWaiting(fresh, {});
  CHECK(p.Before(fresh, next_old));
  CHECK_FALSE(p.Before(next_old, fresh));
  CHECK(p.Before(fresh, old_call));
  // Arrival order would have it the other way round.
  CHECK(MakePolicy("fcfs")->Before(next_old, fresh));
  // Without a program a call is a program of its own: another call's
  // service is not its own.
  SeqState lone1 = Seq(4, 4), lone2 = Seq(5, 5);
  p.OnWaiting(lone1, {});
  p.OnWaiting(lone2, {});
  p.OnService(lone1, 600, 0, 0);
  CHECK(p.Before(lone2, lone1));
  CHECK(p.Before(fresh, lone1));
  CHECK(p.program_service("") == 0);
  // Cached tokens are priced at w_c, generated ones at w_q.
  FairnessOptions f;
  f.cached_weight = 0.5;
  f.generated_weight = 3;
  PlasPolicy q(f);
  q.OnWaiting(old_call, {});
  q.OnService(old_call, 10, 100, 4);
  CHECK(q.program_service("old") == doctest::Approx(10 + 50 + 12));
}

TEST_CASE("plas: within a level, programs go in the order they started") {
  PlasPolicy p({});
  SeqState p1_first = Seq(1, 1, "p1"), p2_first = Seq(2, 2, "p2"), p1_second = Seq(3, 3, "p1");
  p.OnWaiting(p1_first, {});
  p.OnWaiting(p2_first, {});
  p.OnWaiting(p1_second, {});
  p.OnService(p1_first, 100, 0, 50);  // 200: still level 0
  p.OnService(p2_first, 10, 0, 0);
  // p1 started first: its later call goes before p2's earlier one.
  CHECK(p.Before(p1_second, p2_first));
  CHECK_FALSE(p.Before(p2_first, p1_second));
  // Within one program, arrival order.
  CHECK(p.Before(p1_first, p1_second));
  // Past the quantum p1 is a level up, and p2 goes first.
  p.OnService(p1_first, 56, 0, 0);
  CHECK(p.Before(p2_first, p1_second));
  // With no quantum there is one level: start order only.
  FairnessOptions one_level;
  one_level.program_quantum = 0;
  PlasPolicy q(one_level);
  q.OnWaiting(p1_first, {});
  q.OnWaiting(p2_first, {});
  q.OnWaiting(p1_second, {});
  q.OnService(p1_first, 100000, 0, 0);
  CHECK(q.Before(p1_second, p2_first));
}

TEST_CASE("plas: admission takes the longest cached prefix within the first's level") {
  PlasPolicy p({});
  SeqState a = Seq(1, 1, "a"), b = Seq(2, 2, "b"), c = Seq(3, 3, "c"), old = Seq(4, 4, "old");
  for (SeqState* s : {&a, &b, &c, &old}) p.OnWaiting(*s, {});
  p.OnService(old, 1000, 0, 0);  // a level up
  std::vector<SeqState*> waiting = {&old, &c, &b, &a};
  // old has the most cached but is a level up; c beats a and b at level 0.
  CHECK(p.Pick(waiting, std::vector<int>{512, 64, 32, 0}) == &c);
  // Ties (and no cached lengths) in the level's order: a started first.
  CHECK(p.Pick(waiting, std::vector<int>{512, 32, 32, 32}) == &a);
  CHECK(p.Pick(waiting, {}) == &a);
  // A latency-class call stays first, whatever is cached.
  b.goal = GoalClass::kLatency;
  CHECK(p.Pick(waiting, std::vector<int>{512, 64, 0, 0}) == &b);
}

TEST_CASE("plas: latency class beats service level; deadlines first within a level") {
  PlasPolicy p({});
  SeqState served = Seq(1, 1, "served"), fresh = Seq(2, 2, "fresh"), other = Seq(3, 3, "other");
  p.OnWaiting(served, {});
  p.OnWaiting(fresh, {});
  p.OnWaiting(other, {});
  p.OnService(served, 5000, 0, 0);
  served.goal = GoalClass::kLatency;
  CHECK(p.Before(served, fresh));
  served.goal = GoalClass::kThroughput;
  CHECK(p.Before(fresh, served));
  // A deadline does not lift a call above a lower level.
  served.deadline = 1.0;
  CHECK(p.Before(fresh, served));
  // At one level: a call with a deadline before one without, though its
  // program started later; of two deadlines the earlier.
  other.deadline = 50.0;
  CHECK(p.Before(other, fresh));
  fresh.deadline = 60.0;
  CHECK(p.Before(other, fresh));
  fresh.deadline = 40.0;
  CHECK(p.Before(fresh, other));
  // Equal deadlines: the program that started first.
  other.deadline = 40.0;
  CHECK(p.Before(fresh, other));
  // Priority is not looked at.
  other.priority = 10;
  CHECK(p.Before(fresh, other));
}

TEST_CASE("plas: a preempted call is not counted twice; accounts go with programs") {
  PlasPolicy p({});
  SeqState call = Seq(1, 1, "prog");
  p.OnWaiting(call, {});
  p.OnService(call, 50, 0, 0);
  p.OnFinish(call);
  // A program between calls keeps its account (few programs around) ...
  CHECK(p.programs() == 1);
  CHECK(p.program_service("prog") == doctest::Approx(50));
  // ... a call of its own is dropped as it leaves, even after a preemption
  // (back to waiting, it is not a second call).
  SeqState lone = Seq(2, 2);
  p.OnWaiting(lone, {});
  p.OnService(lone, 50, 0, 0);
  lone.preemptions = 1;
  p.OnWaiting(lone, {});
  CHECK(p.programs() == 2);
  p.OnFinish(lone);
  CHECK(p.programs() == 1);
}

TEST_CASE("plas: accounts of programs that left do not pile up") {
  PlasPolicy p({});
  const int n = 2 * static_cast<int>(ProgramAccounts::kMaxIdle);
  for (int i = 0; i < n; ++i) {
    SeqState s = Seq(static_cast<RequestId>(i + 1), i, "prog" + std::to_string(i));
    p.OnWaiting(s, {});
    p.OnService(s, 300, 0, 0);  // level 1
    p.OnFinish(s);
    CHECK(p.programs() <= ProgramAccounts::kMaxIdle + 1);
  }
  CHECK(p.programs() <= ProgramAccounts::kMaxIdle);
  // The first ones left while there was room and are kept; later ones were
  // dropped as they left, and one coming back starts again at 0, level 0
  // (its new first call starts it).
  CHECK(p.program_service("prog0") == doctest::Approx(300));
  const std::string late = "prog" + std::to_string(n - 1);
  CHECK(p.program_service(late) == 0);
  SeqState back = Seq(static_cast<RequestId>(n + 1), n, late);
  SeqState rival = Seq(static_cast<RequestId>(n + 2), n + 1, "rival");
  p.OnWaiting(back, {});
  p.OnWaiting(rival, {});
  CHECK(p.Before(back, rival));
  // A program with a call queued or running keeps its account however many
  // programs there are.
  SeqState busy = Seq(static_cast<RequestId>(n + 3), n + 2, "busy");
  p.OnWaiting(busy, {});
  p.OnService(busy, 300, 0, 0);
  for (int i = 0; i < 10; ++i) {
    SeqState s = Seq(static_cast<RequestId>(n + 10 + i), n + 3, "x" + std::to_string(i));
    p.OnWaiting(s, {});
    p.OnFinish(s);
  }
  CHECK(p.program_service("busy") == doctest::Approx(300));
}

TEST_CASE("vtc: program accounts unchanged by the shared piece") {
  // Within a client, the program with less service first, then start order;
  // calls without a program share one ("").
  VtcPolicy p({});
  SeqState a = Seq(1, 1, "a"), b = Seq(2, 2, "b"), n1 = Seq(3, 3), n2 = Seq(4, 4);
  for (SeqState* s : {&a, &b, &n1, &n2}) {
    s->client = "alice";
    p.OnWaiting(*s, {});
  }
  CHECK(p.Before(a, b));
  p.OnService(a, 300, 0, 0);
  CHECK(p.Before(b, a));
  p.OnService(n1, 300, 0, 0);
  CHECK(p.program_service("") == doctest::Approx(300));
  CHECK(p.Before(b, n2));  // n2's program is n1's
}

}  // namespace
}  // namespace braid
