#include "exec/retention.h"

#include <doctest/doctest.h>

using braid::rt::GapAdvice;
using braid::rt::GapModel;

TEST_CASE("GapModel: a new function is kept for the first TTL") {
  GapModel m(2000, 30000);
  const GapAdvice a = m.Advise("p#turn");
  CHECK(a.keep);
  CHECK(a.ttl_ms == 2000);
  CHECK(a.expected_ms == 1000);
}

TEST_CASE("GapModel: the TTL covers most measured gaps, the median is the expected return") {
  GapModel m(2000, 30000);
  for (int i = 1; i <= 10; ++i) m.Extended("p#turn", 100.0 * i);  // 100 .. 1000 ms
  const GapAdvice a = m.Advise("p#turn");
  CHECK(a.keep);
  CHECK(a.ttl_ms == doctest::Approx(GapModel::kMargin * 900));  // the 0.9 quantile
  CHECK(a.expected_ms == doctest::Approx(500));
  // Capped by the max TTL.
  for (int i = 0; i < 40; ++i) m.Extended("p#slow", 60000);
  CHECK(m.Advise("p#slow").ttl_ms == 30000);
}

TEST_CASE("GapModel: a function whose calls are rarely extended is not kept") {
  GapModel m(2000, 30000);
  for (int i = 0; i < 8; ++i) m.NotExtended("p#map");
  CHECK_FALSE(m.Advise("p#map").keep);
  m.Extended("p#map", 50);  // one in nine: still below the share
  CHECK_FALSE(m.Advise("p#map").keep);
  for (int i = 0; i < 3; ++i) m.Extended("p#map", 50);  // four in twelve
  CHECK(m.Advise("p#map").keep);
  // Functions are apart, and the window forgets: 32 extended calls later,
  // the early misses are gone.
  CHECK(m.Advise("q#map").ttl_ms == 2000);
  for (int i = 0; i < 32; ++i) m.Extended("p#map", 10);
  CHECK(m.Advise("p#map").ttl_ms == doctest::Approx(GapModel::kMargin * 10));
}
