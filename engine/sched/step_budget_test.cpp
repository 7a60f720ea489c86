#include "sched/step_budget.h"

#include <doctest/doctest.h>

namespace braid {
namespace {

TEST_CASE("step budget: grows a granule at a time into sizes not measured") {
  StepBudget b(64, 10.0, 16, 8);
  CHECK(b.Cap() == 16);  // nothing measured: the first granule
  b.Observe(12, 4.0);
  CHECK(b.Cap() == 32);  // 17-32 never measured: try it
  b.Observe(30, 7.0);
  CHECK(b.Cap() == 48);
  b.Observe(40, 12.0);  // over the target
  CHECK(b.Cap() == 32);
  CHECK(b.StepMs(33) == doctest::Approx(12.0));
  CHECK(b.StepMs(64) < 0);
}

TEST_CASE("step budget: the size above is tried again after the probe period") {
  StepBudget b(64, 10.0, 16, 4);
  b.Observe(16, 5.0);
  b.Observe(32, 11.0);  // over
  CHECK(b.Cap() == 16);
  for (int i = 0; i < 3; ++i) b.Observe(16, 5.0);
  CHECK(b.Cap() == 16);
  b.Observe(16, 5.0);  // the fourth step within the cap
  CHECK(b.Cap() == 32);
  b.Observe(32, 10.5);  // the probe: still over (the average falls, but stays above)
  CHECK(b.Cap() == 16);
  b.Observe(32, 6.0);  // costs fell: 0.7 x 10.85 + 0.3 x 6 = 9.4, within
  CHECK(b.Cap() == 48);
}

TEST_CASE("step budget: at least one granule, at most the step's tokens") {
  StepBudget b(40, 2.0, 16, 100);
  b.Observe(8, 3.0);  // even the smallest bucket is over the target
  CHECK(b.Cap() == 16);
  b.Observe(16, 1.0);  // averages 0.7 x 3 + 0.3 x 1 = 2.4: still over
  CHECK(b.Cap() == 16);
  StepBudget c(40, 100.0, 16, 100);
  c.Observe(16, 1.0);
  c.Observe(32, 1.0);
  c.Observe(40, 1.0);
  CHECK(c.Cap() == 40);  // every bucket within: the whole step
  c.Observe(41, 1.0);    // outside the range: ignored
  c.Observe(0, 1.0);
  c.Observe(10, -1.0);
  CHECK(c.StepMs(10) == doctest::Approx(1.0));
}

}  // namespace
}  // namespace braid
