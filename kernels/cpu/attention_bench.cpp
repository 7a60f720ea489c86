// Microbenchmark of decode attention over a paged KV cache, SmolLM2-135M's
// shapes (3 KV heads of 64, 3 query heads each), as the serving engine runs
// it: each thread takes its own sequences and, layer by layer, attends every
// (sequence, KV head) over its context. Blocks of different sequences are
// interleaved in the pool as they are when sequences grow together, and there
// are enough layers for the cache to exceed the last-level cache.
// Prints GB/s of K/V bytes read (values and row scales) per KV type, next to
// the read bandwidth MeasureReadBandwidth finds in the same run.
//
// Usage: attention_bench [seconds_per_case (default 1)] [context (default 320)]
//                        [distinct layers (default 30; 1: every layer reads the
//                        same cache, which then stays in cache: compute alone)]
//                        [window (default 0; > 0: after the above, a sliding
//                        window of that many positions that starts inside a
//                        block, AttendPagedFrom against the reference, per type)]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/huge_pages.h"
#include "kernels/membw.h"
#include "kernels/thread_pool.h"
#include "ref/ref.h"

using namespace braid::kernels;

namespace {

constexpr int kLayers = 30, kKv = 3, kGroup = 3, kHd = 64, kBs = 16, kSeqs = 16;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Cache {
  KvType type;
  size_t elem;
  std::vector<uint8_t, LargeAllocator<uint8_t>> k, v;
  std::vector<float, LargeAllocator<float>> k_scale, v_scale;
  PagedKv Layer(int layer, int n_blocks) const {
    PagedKv p;
    const size_t per_layer = static_cast<size_t>(n_blocks) * kBs * kKv * kHd;
    p.k = k.data() + layer * per_layer * elem;
    p.v = v.data() + layer * per_layer * elem;
    p.block_size = kBs;
    p.block_stride = static_cast<int64_t>(kBs) * kKv * kHd;
    p.head_stride = static_cast<int64_t>(kBs) * kHd;
    p.row_stride = kHd;
    // K as the engine stores it (LlamaForward::KTransposed): dimension-major
    // where the kernels read that fast, and always for q8.
    p.k_transposed =
        type == KvType::kQ8 || (type == KvType::kF16 && AttentionFastTransposedK(kHd, kBs));
    p.type = type;
    if (type == KvType::kQ8) {
      const size_t scales = static_cast<size_t>(n_blocks) * kBs * kKv;
      p.k_scale = k_scale.data() + layer * scales;
      p.v_scale = v_scale.data() + layer * scales;
      p.scale_block_stride = static_cast<int64_t>(kKv) * kBs;
    }
    return p;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  const int context = argc > 2 ? std::atoi(argv[2]) : 320;
  const int distinct = argc > 3 ? std::clamp(std::atoi(argv[3]), 1, kLayers) : kLayers;
  const int blocks_per_seq = (context + kBs - 1) / kBs;
  const int n_blocks = blocks_per_seq * kSeqs;
  // Block j of sequence s is pool block j * kSeqs + s: the sequences grew together.
  std::vector<std::vector<int32_t>> tables(kSeqs, std::vector<int32_t>(blocks_per_seq));
  for (int s = 0; s < kSeqs; ++s)
    for (int j = 0; j < blocks_per_seq; ++j) tables[s][j] = j * kSeqs + s;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(kSeqs) * kKv * kGroup * kHd);
  for (float& x : q) x = u(rng);
  std::printf("context %d, %d sequences, %d layers (%d distinct), %d KV heads of %d, block %d\n",
              context, kSeqs, kLayers, distinct, kKv, kHd, kBs);
  const int window = argc > 4 ? std::clamp(std::atoi(argv[4]), 0, context - 1) : 0;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::printf("threads=%d  read bandwidth %.1f GB/s\n", threads,
                MeasureReadBandwidth(pool, size_t{256} << 20, 3) / 1e9);
    for (KvType type : {KvType::kF32, KvType::kF16, KvType::kQ8}) {
      Cache c;
      c.type = type;
      c.elem = KvElementBytes(type);
      const size_t elems = static_cast<size_t>(distinct) * n_blocks * kBs * kKv * kHd;
      c.k.assign(elems * c.elem, 0);
      c.v.assign(elems * c.elem, 0);
      std::uniform_int_distribution<int> byte(0, 255);
      for (auto& x : c.k)
        x = static_cast<uint8_t>(type == KvType::kF16 ? byte(rng) & 0x3B : byte(rng));
      for (auto& x : c.v)
        x = static_cast<uint8_t>(type == KvType::kF16 ? byte(rng) & 0x3B : byte(rng));
      if (type == KvType::kF32) {  // small finite values
        std::uniform_real_distribution<float> val(-1.0f, 1.0f);
        for (auto* buf : {&c.k, &c.v})
          for (size_t i = 0; i + 4 <= buf->size(); i += 4) {
            const float f = val(rng);
            std::memcpy(buf->data() + i, &f, 4);
          }
      }
      if (type == KvType::kQ8) {
        c.k_scale.assign(static_cast<size_t>(distinct) * n_blocks * kBs * kKv, 0.01f);
        c.v_scale.assign(c.k_scale.size(), 0.01f);
      }
      const double bytes_per_step = static_cast<double>(kLayers) * kSeqs * kKv * context *
                                    (2.0 * kHd * c.elem + (type == KvType::kQ8 ? 8 : 0));
      int steps = 0;
      const double t0 = Now();
      double t = t0;
      while (t - t0 < seconds) {
        pool.Run([&](int tid) {
          std::vector<float> scratch(kGroup * context + 64), out(kGroup * kHd);
          for (int layer = 0; layer < kLayers; ++layer) {
            PagedKv kv = c.Layer(layer % distinct, n_blocks);
            // As the engine does: the first item's K rows fetched before it,
            // then each item with the thread's next one.
            if (tid < kSeqs) {
              kv.block_table = tables[tid].data();
              AttendPrefetch(kv, kHd, 0, context);
            }
            for (int s = tid; s < kSeqs; s += threads) {
              for (int g = 0; g < kKv; ++g) {
                const int ns = g + 1 < kKv ? s : s + threads;
                const AttendNext next{ns < kSeqs ? tables[ns].data() : nullptr, (g + 1) % kKv,
                                      context};
                kv.block_table = tables[s].data();
                AttendPaged(&q[(static_cast<size_t>(s) * kKv + g) * kGroup * kHd], kGroup, kHd, kv,
                            g, context, 0.125f, scratch.data(), out.data(),
                            ns < kSeqs ? &next : nullptr);
              }
            }
          }
        });
        ++steps;
        t = Now();
      }
      const double per_step = (t - t0) / steps;
      const char* name = type == KvType::kF32 ? "f32" : type == KvType::kF16 ? "f16" : "q8";
      std::printf("  %-4s %7.2f ms per step (%d sequences)  %6.1f GB/s\n", name, per_step * 1e3,
                  kSeqs, bytes_per_step / per_step / 1e9);
      if (window == 0 || threads != 1) continue;
      // One (sequence, KV head) over the last `window` positions, the window
      // starting inside a block: the dispatched kernels against the reference.
      int first = context - window;
      if (first % kBs == 0) first = std::max(1, first - 1);
      PagedKv kv = c.Layer(0, n_blocks);
      kv.block_table = tables[0].data();
      std::vector<float> scratch(kGroup * context + 64), out(kGroup * kHd);
      double us[2];
      for (int r = 0; r < 2; ++r) {
        int calls = 0;
        const double w0 = Now();
        while (Now() - w0 < seconds / 4) {
          for (int i = 0; i < 16; ++i) {
            if (r == 0)
              AttendPagedFrom(q.data(), kGroup, kHd, kv, 0, first, context, 0.125f, scratch.data(),
                              out.data());
            else
              ref::AttendPagedFrom(q.data(), kGroup, kHd, kv, 0, first, context, 0.125f,
                                   scratch.data(), out.data());
          }
          calls += 16;
        }
        us[r] = (Now() - w0) / calls * 1e6;
      }
      std::printf("       window [%d, %d): %.1f us per call, reference %.1f us (%.2fx)\n", first,
                  context, us[0], us[1], us[1] / us[0]);
    }
  }
  return 0;
}
