// The fused paged attention kernel against the scalar reference (dispatched
// and AVX2 tables), and its batch invariance: a head's bits do not depend on
// the heads computed with it.
#include "kernels/attention.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/dtype.h"
#include "ref/ref.h"
#include "test_util.h"

namespace braid::kernels {
namespace {

struct Cache {
  std::vector<float> k, v;
  std::vector<uint16_t> k16, v16;  // the same values rounded to fp16
  std::vector<int8_t> k8, v8;      // other values, int8 with a scale per row
  std::vector<float> k8_scale, v8_scale;
  std::vector<int32_t> table;
  PagedKv kv, kv16, kv8;
  const PagedKv& Of(KvType t) const {
    return t == KvType::kF16 ? kv16 : t == KvType::kQ8 ? kv8 : kv;
  }
};

std::vector<uint16_t> ToHalf(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = Fp32ToFp16(x[i]);
  return h;
}

// How a block holds its rows: head-major (KvStore's layout), head-major with
// dimension-major K tiles, or each slot's row holding every head.
enum class Layout { kHeadMajor, kTransposedK, kInterleaved };

// A cache of n_blocks blocks of `bs` slots of n_kv heads, blocks in shuffled order.
Cache MakeCache(std::mt19937& rng, int n_blocks, int bs, int n_kv, int hd,
                Layout layout = Layout::kHeadMajor) {
  const bool interleaved = layout == Layout::kInterleaved;
  Cache c;
  const int64_t width = static_cast<int64_t>(n_kv) * hd;
  c.k = testing::RandomFloats(rng, n_blocks * bs * width, -2.0f, 2.0f);
  c.v = testing::RandomFloats(rng, n_blocks * bs * width);
  c.table.resize(n_blocks);
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), rng);
  c.k16 = ToHalf(c.k);
  c.v16 = ToHalf(c.v);
  PagedKv p;
  p.block_table = c.table.data();
  p.block_size = bs;
  p.block_stride = bs * width;
  p.head_stride = interleaved ? hd : static_cast<int64_t>(bs) * hd;
  p.row_stride = interleaved ? width : hd;
  p.k_transposed = layout == Layout::kTransposedK;
  c.kv = p;
  c.kv.k = c.k.data();
  c.kv.v = c.v.data();
  c.kv16 = p;
  c.kv16.k = c.k16.data();
  c.kv16.v = c.v16.data();
  c.kv16.type = KvType::kF16;
  std::uniform_int_distribution<int> q8(-127, 127);
  std::uniform_real_distribution<float> sc(0.001f, 0.03f);
  c.k8.resize(c.k.size());
  c.v8.resize(c.v.size());
  for (auto& x : c.k8) x = static_cast<int8_t>(q8(rng));
  for (auto& x : c.v8) x = static_cast<int8_t>(q8(rng));
  c.k8_scale.resize(static_cast<size_t>(n_blocks) * n_kv * bs);
  c.v8_scale.resize(c.k8_scale.size());
  for (auto& x : c.k8_scale) x = sc(rng);
  for (auto& x : c.v8_scale) x = sc(rng);
  c.kv8 = p;
  c.kv8.k = c.k8.data();
  c.kv8.v = c.v8.data();
  c.kv8.type = KvType::kQ8;
  c.kv8.k_scale = c.k8_scale.data();
  c.kv8.v_scale = c.v8_scale.data();
  c.kv8.scale_block_stride = static_cast<int64_t>(n_kv) * bs;
  return c;
}

void CheckAgainstReference(std::mt19937& rng) {
  struct Case {
    int hd, bs;
    Layout layout;
  };
  const Layout H = Layout::kHeadMajor, T = Layout::kTransposedK, I = Layout::kInterleaved;
  for (const Case& cs : {Case{64, 16, H},
                         {40, 16, H},
                         {72, 16, H},
                         {128, 16, H},
                         {32, 16, H},
                         {96, 8, H},
                         {64, 8, H},
                         {64, 32, H},
                         {64, 16, I},
                         {64, 16, T},
                         {128, 16, T},
                         {32, 16, T},
                         {96, 16, T},
                         {64, 8, T},
                         {40, 16, T},
                         {256, 16, H},
                         {256, 16, T}}) {
    const int hd = cs.hd, bs = cs.bs;
    const int n_blocks = 384 / bs, n_kv = 2;
    const Cache c = MakeCache(rng, n_blocks, bs, n_kv, hd, cs.layout);
    for (int n_q : {1, 3, 4, 5, 7}) {
      for (int len : {1, 2, 15, 17, 100, n_blocks * bs}) {
        const std::vector<float> q = testing::RandomFloats(rng, n_q * hd);
        std::vector<float> scratch(static_cast<size_t>(n_q) * len), got(n_q * hd), want(n_q * hd);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8}) {
          AttendPaged(q.data(), n_q, hd, c.Of(type), 1, len, scale, scratch.data(), got.data());
          ref::AttendPaged(q.data(), n_q, hd, c.Of(type), 1, len, scale, scratch.data(),
                           want.data());
          int bad = 0;
          for (int i = 0; i < n_q * hd; ++i)
            if (std::fabs(got[i] - want[i]) > 1e-5f * (1.0f + std::fabs(want[i]))) ++bad;
          INFO("isa " << std::string(KernelIsa()) << " hd " << hd << " bs " << bs << " n_q " << n_q
                      << " len " << len << " fp16 " << (type == KvType::kF16) << " layout "
                      << static_cast<int>(cs.layout));
          CHECK(bad == 0);
        }
      }
    }
  }
}

TEST_CASE("AttendPaged matches the reference") {
  std::mt19937 rng(31);
  testing::ForEachSimdTable([&] { CheckAgainstReference(rng); });
  const bool before = ForceScalarKernels(true);
  CheckAgainstReference(rng);
  ForceScalarKernels(before);
}

TEST_CASE("AttendPaged: q8 over more positions than one int32 run holds") {
  // The integer V sums restart every kQ8AttentionRun positions (attention.h):
  // a context just past one run, with the largest V values, so that the
  // kernel's run loop (and each run's int32 sums near their limit) is checked
  // against the reference's.
  std::mt19937 rng(33);
  testing::ForEachSimdTable([&] {
    const int hd = 64, bs = 16, n_kv = 1, n_q = 3;
    const int len = ref::kQ8AttentionRun + 300;
    const int n_blocks = (len + bs - 1) / bs;
    Cache c = MakeCache(rng, n_blocks, bs, n_kv, hd);
    std::fill(c.v8.begin(), c.v8.end(), static_cast<int8_t>(127));
    std::fill(c.k8.begin(), c.k8.end(),
              static_cast<int8_t>(0));  // equal scores: every weight maximal
    const std::vector<float> q = testing::RandomFloats(rng, n_q * hd);
    std::vector<float> scratch(static_cast<size_t>(n_q) * len), got(n_q * hd), want(n_q * hd);
    AttendPaged(q.data(), n_q, hd, c.kv8, 0, len, 0.125f, scratch.data(), got.data());
    ref::AttendPaged(q.data(), n_q, hd, c.kv8, 0, len, 0.125f, scratch.data(), want.data());
    int bad = 0;
    for (int i = 0; i < n_q * hd; ++i)
      bad += std::fabs(got[i] - want[i]) > 1e-5f * (1.0f + std::fabs(want[i]));
    INFO("isa " << std::string(KernelIsa()) << " out[0] " << got[0] << " want " << want[0]);
    CHECK(bad == 0);
    CHECK(want[0] > 0.0f);
  });
}

TEST_CASE("AttendPaged: a head's bits do not depend on the heads computed with it") {
  std::mt19937 rng(32);
  testing::ForEachSimdTable([&] {
    const int hd = 64, bs = 16, n_q = 11;  // heads in passes of 8 (dimension-major K) and 4
    for (Layout layout : {Layout::kHeadMajor, Layout::kTransposedK})
      for (auto [len, type] : {std::pair{1, KvType::kF32},
                               {33, KvType::kF32},
                               {250, KvType::kF32},
                               {33, KvType::kF16},
                               {250, KvType::kF16},
                               {33, KvType::kQ8},
                               {250, KvType::kQ8}}) {
        const Cache c = MakeCache(rng, 20, bs, 3, hd, layout);
        const std::vector<float> q = testing::RandomFloats(rng, n_q * hd);
        std::vector<float> scratch(static_cast<size_t>(n_q) * len), group(n_q * hd), alone(hd);
        AttendPaged(q.data(), n_q, hd, c.Of(type), 2, len, 0.125f, scratch.data(), group.data());
        for (int h = 0; h < n_q; ++h) {
          AttendPaged(q.data() + h * hd, 1, hd, c.Of(type), 2, len, 0.125f, scratch.data(),
                      alone.data());
          INFO("isa " << std::string(KernelIsa()) << " len " << len << " head " << h << " layout "
                      << static_cast<int>(layout));
          CHECK(std::memcmp(alone.data(), group.data() + h * hd, hd * sizeof(float)) == 0);
        }
      }
  });
}

TEST_CASE("AttendPaged: the next-item hint changes no bit") {
  std::mt19937 rng(33);
  testing::ForEachSimdTable([&] {
    const int hd = 64, bs = 16;
    for (int n_q : {3, 6})  // one pass of heads, and two (the fetch spread over the first)
      for (auto [len, next_len] : {std::pair{250, 250}, {17, 300}, {300, 1}})
        for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8}) {
          const Cache c = MakeCache(
              rng, 20, bs, 3, hd, type == KvType::kF32 ? Layout::kHeadMajor : Layout::kTransposedK);
          std::vector<int32_t> other(c.table.rbegin(), c.table.rend());
          const std::vector<float> q = testing::RandomFloats(rng, n_q * hd);
          std::vector<float> scratch(static_cast<size_t>(n_q) * len), plain(n_q * hd),
              hinted(n_q * hd);
          AttendPaged(q.data(), n_q, hd, c.Of(type), 1, len, 0.125f, scratch.data(), plain.data());
          const AttendNext next{other.data(), 2, next_len};
          AttendPaged(q.data(), n_q, hd, c.Of(type), 1, len, 0.125f, scratch.data(), hinted.data(),
                      &next);
          INFO("isa " << std::string(KernelIsa()) << " n_q " << n_q << " len " << len << " next "
                      << next_len << " type " << static_cast<int>(type));
          CHECK(std::memcmp(plain.data(), hinted.data(), plain.size() * sizeof(float)) == 0);
        }
  });
}

TEST_CASE("AttendPagedFrom: a window of the positions, from a block boundary or not") {
  std::mt19937 rng(41);
  testing::ForEachSimdTable([&] {
    const int bs = 16, n_blocks = 12, n_kv = 2, n_q = 2;
    for (int hd : {64, 256, 72}) {
      for (Layout layout : {Layout::kHeadMajor, Layout::kTransposedK}) {
        const Cache c = MakeCache(rng, n_blocks, bs, n_kv, hd, layout);
        const std::vector<float> q = testing::RandomFloats(rng, n_q * hd);
        const float scale = 0.1f;
        for (auto [first, len] : {std::pair{0, 40}, {16, 40}, {5, 40}, {37, 38}, {32, 192}}) {
          std::vector<float> scratch(static_cast<size_t>(n_q) * len), got(n_q * hd), want(n_q * hd);
          INFO("hd " << hd << " layout " << static_cast<int>(layout) << " first " << first
                     << " len " << len);
          for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8}) {
            // Blocks before the window's are never read: their table entries
            // point far outside the cache (kv::kNoBlock in the engine).
            std::vector<int32_t> table(c.table);
            for (int b = 0; b < first / bs; ++b) table[b] = -(1 << 20);
            PagedKv kv = c.Of(type);
            kv.block_table = table.data();
            AttendPagedFrom(q.data(), n_q, hd, kv, 1, first, len, scale, scratch.data(),
                            got.data());
            ref::AttendPagedFrom(q.data(), n_q, hd, c.Of(type), 1, first, len, scale,
                                 scratch.data(), want.data());
            for (int i = 0; i < n_q * hd; ++i)
              CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5).scale(1.0));
          }
          if (layout != Layout::kHeadMajor) continue;
          // The reference against the definition: softmax over [first, len) only.
          for (int h = 0; h < n_q; ++h) {
            std::vector<double> s(len - first);
            double mx = -1e300, sum = 0;
            for (int j = first; j < len; ++j) {
              double d = 0;
              for (int i = 0; i < hd; ++i) d += double(q[h * hd + i]) * c.k[c.kv.Offset(1, j) + i];
              s[j - first] = d * scale;
              mx = std::max(mx, s[j - first]);
            }
            for (double& x : s) sum += (x = std::exp(x - mx));
            ref::AttendPagedFrom(q.data(), n_q, hd, c.kv, 1, first, len, scale, scratch.data(),
                                 want.data());
            for (int i = 0; i < hd; ++i) {
              double o = 0;
              for (int j = first; j < len; ++j)
                o += s[j - first] / sum * c.v[c.kv.Offset(1, j) + i];
              CHECK(want[h * hd + i] == doctest::Approx(o).epsilon(1e-4).scale(1.0));
            }
          }
        }
      }
    }
  });
}

TEST_CASE("StoreRowQ8: the dispatched kernel stores the reference's bytes and scale") {
  std::mt19937 rng(35);
  testing::ForEachSimdTable([&] {
    for (int hd : {32, 64, 128, 256, 40})
      for (int bs : {16, 8})
        for (bool value : {false, true})
          for (int slot = 0; slot < bs; slot += 3) {
            std::vector<float> x = testing::RandomFloats(rng, hd, -3.0f, 3.0f);
            if (slot == 3) std::fill(x.begin(), x.end(), 0.0f);  // an all-zero row
            if (slot == 6) x[hd / 2] = std::nanf("");            // a NaN element
            if (slot == 9) {  // scale exactly 1: ties at k.5 round to even
              x[0] = 127.0f;
              x[1] = 2.5f;
              x[2] = -3.5f;
            }
            std::vector<uint8_t> got(static_cast<size_t>(bs) * hd, 7), want(got);
            const float s_got = StoreRowQ8(x.data(), hd, bs, slot, value, got.data());
            const float s_want = ref::StoreRowQ8(x.data(), hd, bs, slot, value, want.data());
            INFO("isa " << std::string(KernelIsa()) << " hd " << hd << " bs " << bs << " value "
                        << value << " slot " << slot);
            CHECK(std::memcmp(&s_got, &s_want, sizeof(float)) == 0);
            CHECK(got == want);  // the row's bytes, and every other slot's left as it was
          }
  });
}

}  // namespace
}  // namespace braid::kernels
