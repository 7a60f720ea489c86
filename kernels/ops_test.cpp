// Dispatched ops against the scalar reference, and the reference ops against
// their definitions.
#include "kernels/ops.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/quant.h"
#include "ref/ref.h"
#include "test_util.h"

namespace braid::kernels {
namespace {

using testing::RandomFloats;

const int64_t kSizes[] = {1, 7, 8, 15, 64, 576, 1536, 1543};

TEST_CASE("RmsNorm matches the reference (rel 1e-5)") {
  std::mt19937 rng(31);
  for (int64_t n : kSizes) {
    const std::vector<float> x = RandomFloats(rng, n, -3, 3), w = RandomFloats(rng, n);
    std::vector<float> y(n), want(n);
    RmsNorm(x.data(), w.data(), 1e-5f, n, y.data());
    ref::RmsNorm(x.data(), w.data(), 1e-5f, n, want.data());
    for (int64_t i = 0; i < n; ++i) CHECK(y[i] == doctest::Approx(want[i]).epsilon(1e-5));
    std::vector<float> alias = x;  // y may alias x
    RmsNorm(alias.data(), w.data(), 1e-5f, n, alias.data());
    for (int64_t i = 0; i < n; ++i) CHECK(alias[i] == y[i]);
  }
}

TEST_CASE("SwiGlu with the fast exp matches the reference (rel 1e-5 + abs 1e-6)") {
  std::mt19937 rng(32);
  testing::ForEachSimdTable([&] {
    for (int64_t n : kSizes) {
      std::vector<float> g = RandomFloats(rng, n, -20, 20), u = RandomFloats(rng, n, -2, 2);
      if (n > 4) {
        g[0] = -100.0f;
        g[1] = 100.0f;
        g[2] = 0.0f;
        g[3] = -87.5f;
      }
      std::vector<float> y(n), want(n);
      SwiGlu(g.data(), u.data(), n, y.data());
      ref::SwiGlu(g.data(), u.data(), n, want.data());
      for (int64_t i = 0; i < n; ++i) {
        INFO("gate " << g[i]);
        CHECK(std::fabs(y[i] - want[i]) <= 1e-5 * std::fabs(want[i]) + 1e-6);
      }
    }
  });
}

TEST_CASE("DotF32 and Axpy match the reference") {
  std::mt19937 rng(33);
  for (int64_t n : kSizes) {
    const std::vector<float> a = RandomFloats(rng, n), b = RandomFloats(rng, n);
    double mag = 0;
    for (int64_t i = 0; i < n; ++i) mag += std::fabs((double)a[i] * b[i]);
    CHECK(std::fabs(DotF32(a.data(), b.data(), n) - ref::DotF32(a.data(), b.data(), n)) <=
          1e-6 * mag + 1e-7);
    std::vector<float> y = b, want = b;
    Axpy(0.37f, a.data(), n, y.data());
    ref::Axpy(0.37f, a.data(), n, want.data());
    for (int64_t i = 0; i < n; ++i) CHECK(y[i] == doctest::Approx(want[i]).epsilon(1e-6));
  }
}

TEST_CASE("Argmax: the first index of the largest non-NaN value, as the reference") {
  std::mt19937 rng(12);
  testing::ForEachSimdTable([&] {
    for (int64_t n : {1, 7, 8, 31, 32, 33, 100, 49152}) {
      std::vector<float> x = testing::RandomFloats(rng, n);
      CHECK(Argmax(x.data(), n) == ref::Argmax(x.data(), n));
      // Ties go to the first; NaNs are skipped; all NaN gives 0.
      const int64_t a = n / 3, b = n - 1;
      x[b] = x[a] = 5.0f;
      CHECK(Argmax(x.data(), n) == a);
      x[0] = std::nanf("");
      if (n > 1) x[n / 2] = std::nanf("");
      CHECK(Argmax(x.data(), n) == ref::Argmax(x.data(), n));
      std::fill(x.begin(), x.end(), std::nanf(""));
      CHECK(Argmax(x.data(), n) == 0);
      CHECK(ref::Argmax(x.data(), n) == 0);
      std::fill(x.begin(), x.end(), -INFINITY);
      x[0] = std::nanf("");
      CHECK(Argmax(x.data(), n) == (n > 1 ? 1 : 0));
      CHECK(ref::Argmax(x.data(), n) == Argmax(x.data(), n));
    }
  });
}

TEST_CASE("Softmax sums to one and is shift invariant") {
  std::mt19937 rng(34);
  std::vector<float> x = RandomFloats(rng, 100, -30, 30), y = x;
  for (float& v : y) v += 1000.0f;
  Softmax(x.data(), 100);
  Softmax(y.data(), 100);
  CHECK(std::accumulate(x.begin(), x.end(), 0.0) == doctest::Approx(1.0).epsilon(1e-6));
  for (int i = 0; i < 100; ++i) CHECK(x[i] == doctest::Approx(y[i]).epsilon(1e-4));
}

TEST_CASE("Rope rotates adjacent pairs (norm) or split halves (neox)") {
  const int n_rot = 8;
  float inv_freq[4];
  for (int i = 0; i < 4; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / n_rot);
  std::vector<float> x(8);
  std::iota(x.begin(), x.end(), 1.0f);
  std::vector<float> norm = x, neox = x;
  const int64_t pos = 3;
  Rope(norm.data(), n_rot, pos, inv_freq, false);
  Rope(neox.data(), n_rot, pos, inv_freq, true);
  for (int i = 0; i < 4; ++i) {
    const double th = pos * (double)inv_freq[i], c = std::cos(th), s = std::sin(th);
    CHECK(norm[2 * i] == doctest::Approx(x[2 * i] * c - x[2 * i + 1] * s).epsilon(1e-5));
    CHECK(norm[2 * i + 1] == doctest::Approx(x[2 * i] * s + x[2 * i + 1] * c).epsilon(1e-5));
    CHECK(neox[i] == doctest::Approx(x[i] * c - x[i + 4] * s).epsilon(1e-5));
    CHECK(neox[i + 4] == doctest::Approx(x[i] * s + x[i + 4] * c).epsilon(1e-5));
  }
  // Rotation preserves the norm; position 0 is the identity.
  double n0 = 0, n1 = 0;
  for (int i = 0; i < 8; ++i) {
    n0 += x[i] * x[i];
    n1 += norm[i] * norm[i];
  }
  CHECK(n1 == doctest::Approx(n0).epsilon(1e-5));
  std::vector<float> id = x;
  Rope(id.data(), n_rot, 0, inv_freq, false);
  CHECK(id == x);
}

TEST_CASE("RopeCosSin + RopeApply are Rope bit for bit") {
  std::mt19937 rng(9);
  testing::ForEachSimdTable([&] {
    for (int n_rot : {64, 128, 40})  // 40: not a whole number of vectors
      for (int64_t pos : {0, 1, 17, 4095, 131071}) {
        std::vector<float> inv_freq(n_rot / 2);
        for (int i = 0; i < n_rot / 2; ++i) inv_freq[i] = std::pow(100000.0f, -2.0f * i / n_rot);
        for (bool neox : {false, true}) {
          const std::vector<float> x = testing::RandomFloats(rng, n_rot, -3.0f, 3.0f);
          std::vector<float> a = x, b = x, c(n_rot / 2), s(n_rot / 2);
          Rope(a.data(), n_rot, pos, inv_freq.data(), neox);
          RopeCosSin(n_rot, pos, inv_freq.data(), c.data(), s.data());
          RopeApply(b.data(), n_rot, c.data(), s.data(), neox);
          INFO("isa " << std::string(KernelIsa()) << " n_rot " << n_rot << " pos " << pos
                      << " neox " << neox);
          CHECK(std::memcmp(a.data(), b.data(), n_rot * sizeof(float)) == 0);
        }
      }
  });
}

TEST_CASE("ops under ForceScalarKernels equal the reference exactly") {
  const bool before = ForceScalarKernels(true);
  std::mt19937 rng(35);
  const std::vector<float> a = RandomFloats(rng, 576), b = RandomFloats(rng, 576);
  CHECK(DotF32(a.data(), b.data(), 576) == ref::DotF32(a.data(), b.data(), 576));
  std::vector<float> y(576), want(576);
  SwiGlu(a.data(), b.data(), 576, y.data());
  ref::SwiGlu(a.data(), b.data(), 576, want.data());
  CHECK(y == want);
  ForceScalarKernels(before);
}

}  // namespace
}  // namespace braid::kernels
