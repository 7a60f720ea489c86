// KvStore's element types against each other: the same K and V rows stored
// as fp32, fp16 and q8 (packed tiles) give the same attention, within each
// type's rounding.
#include "backend/cpu/kv_store.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention.h"

namespace braid {
namespace {

std::vector<float> Random(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

TEST_CASE("KvStore: fp16 and q8 caches attend like fp32") {
  const int n_layer = 2, n_blocks = 6, bs = 16, n_kv = 2, n_q = 3;
  std::mt19937 rng(5);
  for (int hd : {64, 32, 40}) {
    for (int len : {1, 5, 16, 37, 80}) {
      const std::vector<int32_t> table = {4, 1, 5, 0, 2};
      const std::vector<float> k = Random(rng, static_cast<size_t>(len) * n_kv * hd, 1.0f);
      const std::vector<float> v = Random(rng, k.size(), 1.0f);
      const std::vector<float> q = Random(rng, static_cast<size_t>(n_q) * hd, 1.5f);
      std::vector<float> want(n_q * hd);
      for (kernels::KvType type :
           {kernels::KvType::kF32, kernels::KvType::kF16, kernels::KvType::kQ8}) {
        KvStore store(n_layer, n_blocks, bs, n_kv, hd, type,
                      /*k_transposed=*/type == kernels::KvType::kF16);
        for (int j = 0; j < len; ++j)
          for (int g = 0; g < n_kv; ++g) {
            const size_t row = (static_cast<size_t>(j) * n_kv + g) * hd;
            store.Put(false, 1, table[j / bs], j % bs, g, &k[row]);
            store.Put(true, 1, table[j / bs], j % bs, g, &v[row]);
          }
        kernels::PagedKv kv = store.Layer(1);
        kv.block_table = table.data();
        std::vector<float> scratch(static_cast<size_t>(n_q) * len), got(n_q * hd);
        kernels::AttendPaged(q.data(), n_q, hd, kv, 1, len,
                             1.0f / std::sqrt(static_cast<float>(hd)), scratch.data(), got.data());
        if (type == kernels::KvType::kF32) {
          want = got;
          continue;
        }
        double err = 0, norm = 0;
        for (int i = 0; i < n_q * hd; ++i) {
          err += (got[i] - want[i]) * (got[i] - want[i]);
          norm += want[i] * want[i];
        }
        const double rel = std::sqrt(err / norm);
        INFO("hd " << hd << " len " << len << " type " << static_cast<int>(type)
                   << " relative error " << rel);
        CHECK(rel < (type == kernels::KvType::kF16 ? 2e-3 : 3e-2));
      }
    }
  }
}

}  // namespace
}  // namespace braid
