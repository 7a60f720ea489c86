// The decode-only steps' roofline: bound by the weights' read, by the
// products, and without a bandwidth or an operation rate.
#include "engine/roofline.h"

#include <doctest/doctest.h>

namespace braid {
namespace {

// 10 steps of 10 sequences, 1,000 positions attended in all; 1 GB of
// weights, 1 KB of KV a position, 1 TB/s; 2 G operations a sequence.
DecodeRoofline Steps(double ops_rate, double bandwidth = 1e12) {
  return DecodeStepsRoofline(10, 100, 1000, 1e9, 1e3, bandwidth, 2e9, ops_rate);
}

TEST_CASE("DecodeStepsRoofline: the weights' read where the products are faster") {
  const DecodeRoofline r = Steps(1e15);  // a step's products: 20 us, its weights 1 ms
  CHECK_FALSE(r.products_bound);
  CHECK(r.seconds == doctest::Approx(10 * 1e-3 + 1000 * 1e3 / 1e12));
}

TEST_CASE("DecodeStepsRoofline: the products where they are slower") {
  const DecodeRoofline r = Steps(1e12);  // a step's products: 20 ms
  CHECK(r.products_bound);
  CHECK(r.seconds == doctest::Approx(10 * 20e-3 + 1e-6));
}

TEST_CASE("DecodeStepsRoofline: no operation rate, no bandwidth, no steps") {
  CHECK(Steps(0).seconds == doctest::Approx(10 * 1e-3 + 1e-6));
  CHECK_FALSE(Steps(0).products_bound);
  CHECK(Steps(1e12, 0).seconds == 0);
  CHECK(DecodeStepsRoofline(0, 0, 0, 1e9, 1e3, 1e12, 2e9, 1e12).seconds == 0);
}

}  // namespace
}  // namespace braid
