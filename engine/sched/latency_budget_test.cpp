#include "sched/latency_budget.h"

#include <doctest/doctest.h>

namespace braid {
namespace {

TEST_CASE("latency budget: alone until measured, then grows one size at a time") {
  LatencyBudget b(64, 1.4, 32);
  CHECK(b.Cap(1) == 1);  // no reference yet: the latency work runs alone
  b.Observe(1, 2.0, /*latency_only=*/true);
  CHECK(b.Cap(1) == 2);  // 2 tokens never measured: try it
  b.Observe(2, 2.2, false);
  CHECK(b.Cap(1) == 3);
  b.Observe(3, 2.7, false);
  CHECK(b.Cap(1) == 4);
  b.Observe(4, 3.5, false);  // over 1.4 x 2.0
  CHECK(b.Cap(1) == 3);      // stops at the first size over budget
  CHECK(b.StepMs(4) == doctest::Approx(3.5));
  CHECK(b.StepMs(5) < 0);
}

TEST_CASE("latency budget: a latency-only step is forced every refresh period") {
  LatencyBudget b(16, 1.5, 4);
  b.Observe(1, 1.0, true);
  for (int i = 0; i < 3; ++i) b.Observe(2, 1.1, false);
  CHECK(b.Cap(1) >= 2);
  b.Observe(2, 1.1, false);  // fourth mixed step in a row
  CHECK(b.Cap(1) == 1);
  b.Observe(1, 1.2, true);  // the reference follows
  CHECK(b.Cap(1) >= 2);
}

TEST_CASE("latency budget: the reference is per latency token count") {
  LatencyBudget b(16, 1.4, 32);
  b.Observe(1, 1.0, true);
  CHECK(b.Cap(3) == 3);  // 3 latency tokens alone never measured
  b.Observe(3, 2.0, true);
  b.Observe(4, 2.5, false);
  b.Observe(5, 2.7, false);
  CHECK(b.Cap(3) == 6);     // 4 and 5 within 2.8 ms; 6 not measured yet
  CHECK(b.Cap(100) == 16);  // clamped to the largest step
  CHECK(b.Cap(0) >= 1);
}

}  // namespace
}  // namespace braid
