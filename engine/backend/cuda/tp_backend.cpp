#include "backend/cuda/tp_backend.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/collective.h"
#include "backend/cuda/cuda_backend.h"
#include "kernels/cuda_ops.h"

namespace braid {
namespace {

// One thread per rank past the first (rank 0 runs on the caller's): RunAll
// hands every rank the same job and waits for all of them.
class RankThreads {
 public:
  explicit RankThreads(int ranks) : results_(static_cast<size_t>(ranks)) {
    for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { Loop(r); });
  }
  ~RankThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  // fn(r) for every rank at once; the lowest rank's error, if any.
  Status RunAll(const std::function<Status(int)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    start_.notify_all();
    results_[0] = fn(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    for (const Status& s : results_)
      if (!s.ok()) return s;
    return Status::Ok();
  }

 private:
  void Loop(int r) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<Status(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      Status s = (*job)(r);
      std::lock_guard<std::mutex> lock(mu_);
      results_[static_cast<size_t>(r)] = std::move(s);
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<Status(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<Status> results_;
  std::vector<std::thread> threads_;
};

// Each rank's KV memory: the same blocks, each holding its rank's KV heads.
// On the host a block is every rank's part in rank order, and a fence is one
// of each rank's.
class TpKv final : public KvMemory {
 public:
  std::vector<std::unique_ptr<KvMemory>> parts;
  int n_blocks() const override { return parts[0]->n_blocks(); }
  int block_size() const override { return parts[0]->block_size(); }
  size_t bytes() const override {
    size_t b = 0;
    for (const auto& p : parts) b += p->bytes();
    return b;
  }

  size_t block_bytes() const override {
    size_t b = 0;
    for (const auto& p : parts) b += p->block_bytes();
    return b;
  }
  // Rank 0 page-locks the memory for every GPU (CudaKv registers it portable).
  Status RegisterHost(void* p, size_t bytes) override { return parts[0]->RegisterHost(p, bytes); }
  void UnregisterHost(void* p) override { parts[0]->UnregisterHost(p); }
  Result<uint64_t> CopyOut(std::span<const int32_t> blocks,
                           std::span<uint8_t* const> dst) override {
    std::vector<uint8_t*> at(dst.size());
    return Copy([&](KvMemory& part, size_t offset) {
      for (size_t i = 0; i < dst.size(); ++i) at[i] = dst[i] + offset;
      return part.CopyOut(blocks, at);
    });
  }
  Result<uint64_t> CopyIn(std::span<const uint8_t* const> src,
                          std::span<const int32_t> blocks) override {
    std::vector<const uint8_t*> at(src.size());
    return Copy([&](KvMemory& part, size_t offset) {
      for (size_t i = 0; i < src.size(); ++i) at[i] = src[i] + offset;
      return part.CopyIn(at, blocks);
    });
  }
  Status WaitCopies(uint64_t fence) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fences_.find(fence);
    if (it == fences_.end()) return Status::Ok();  // taken: done
    for (size_t r = 0; r < parts.size(); ++r)
      BRAID_RETURN_IF_ERROR(parts[r]->WaitCopies(it->second[r]));
    return Status::Ok();
  }
  bool CopiesDone(uint64_t fence) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fences_.find(fence);
    return it == fences_.end() || Done(it->second);
  }
  // The slowest rank's seconds.
  double TakeCopySeconds(uint64_t fence) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fences_.find(fence);
    if (it == fences_.end()) return 0;
    if (!Done(it->second)) return -1;
    double s = 0;
    for (size_t r = 0; r < parts.size(); ++r)
      s = std::max(s, parts[r]->TakeCopySeconds(it->second[r]));
    fences_.erase(it);
    return s;
  }

 private:
  static constexpr size_t kKeptFences = 4096;  // as CudaKv's
  bool Done(const std::vector<uint64_t>& fences) {
    for (size_t r = 0; r < parts.size(); ++r)
      if (!parts[r]->CopiesDone(fences[r])) return false;
    return true;
  }
  // one(part, offset of its section in a host block) for every rank.
  template <typename F>
  Result<uint64_t> Copy(F&& one) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t> fences;
    size_t offset = 0;
    for (const auto& p : parts) {
      Result<uint64_t> f = one(*p, offset);
      if (!f.ok()) {
        // The ranks that enqueued theirs finish before the caller takes its
        // host memory back.
        for (size_t r = 0; r < fences.size(); ++r) {
          while (!parts[r]->CopiesDone(fences[r])) std::this_thread::yield();
          parts[r]->TakeCopySeconds(fences[r]);
        }
        return f.status();
      }
      fences.push_back(*f);
      offset += p->block_bytes();
    }
    fences_.emplace(++fence_, std::move(fences));
    // Bounds what fences nobody takes keep: the oldest, once done, go.
    while (fences_.size() > kKeptFences && Done(fences_.begin()->second)) {
      for (size_t r = 0; r < parts.size(); ++r)
        parts[r]->TakeCopySeconds(fences_.begin()->second[r]);
      fences_.erase(fences_.begin());
    }
    return fence_;
  }

  std::mutex mu_;  // what follows
  uint64_t fence_ = 0;
  std::map<uint64_t, std::vector<uint64_t>> fences_;  // per fence: each rank's
};

class TpBackend final : public Backend {
 public:
  TpBackend(std::vector<int> devices, std::unique_ptr<NcclGroup> nccl)
      : devices_(std::move(devices)), nccl_(std::move(nccl)), threads_(size()) {}

  Status Open(const ModelFile& file, const ModelOptions& options, int context,
              const std::vector<Collective*>& ranks) {
    ranks_.resize(devices_.size());
    // Ranks load at once (each its own GPU and share of the file).
    return threads_.RunAll([&](int r) -> Status {
      BRAID_ASSIGN_OR_RETURN(ranks_[static_cast<size_t>(r)],
                             OpenCudaBackendRank(file, options, devices_[static_cast<size_t>(r)],
                                                 context, *ranks[static_cast<size_t>(r)]));
      return Status::Ok();
    });
  }

  std::string name() const override {
    std::string n = "cuda:";
    for (size_t i = 0; i < devices_.size(); ++i) n += (i ? "+" : "") + std::to_string(devices_[i]);
    return n;
  }
  int n_vocab() const override { return ranks_[0]->n_vocab(); }
  int max_chunk() const override { return ranks_[0]->max_chunk(); }
  ServingDefaults serving_defaults() const override { return ranks_[0]->serving_defaults(); }
  // Per GPU: each rank's pool has as many blocks, each of its share of the heads.
  size_t KvBlockBytes(int block_size) const override { return ranks_[0]->KvBlockBytes(block_size); }
  uint64_t KvMemoryAvailable() const override {
    uint64_t least = ranks_[0]->KvMemoryAvailable();
    for (const auto& r : ranks_) least = std::min(least, r->KvMemoryAvailable());
    return least;
  }
  Result<std::unique_ptr<KvMemory>> AllocateKv(int n_blocks, int block_size) override {
    auto kv = std::make_unique<TpKv>();
    for (const auto& r : ranks_) {
      BRAID_ASSIGN_OR_RETURN(std::unique_ptr<KvMemory> part, r->AllocateKv(n_blocks, block_size));
      kv->parts.push_back(std::move(part));
    }
    return std::unique_ptr<KvMemory>(std::move(kv));
  }
  // Each rank computes its slice of the head's rows (CudaRank); the slices'
  // outputs meet here, on the host: logits in place (each rank writes its
  // columns), the argmax as the largest of the ranks' keys, the top k as
  // the best k of the ranks' candidates.
  Status Forward(std::span<const BatchSegment> batch, KvMemory& kv, float* logits) override {
    return Each(kv,
                [&](CudaRank& b, KvMemory& part, int) { return b.Forward(batch, part, logits); });
  }
  Status ForwardArgmax(std::span<const BatchSegment> batch, KvMemory& kv, int32_t* ids) override {
    const size_t rows = OutputRows(batch);
    // Per rank, its keys of each row.
    std::vector<std::vector<uint64_t>> keys(static_cast<size_t>(size()),
                                            std::vector<uint64_t>(std::max<size_t>(1, rows)));
    BRAID_RETURN_IF_ERROR(Each(kv, [&](CudaRank& b, KvMemory& part, int r) {
      return b.ForwardArgmaxKeys(batch, part, keys[static_cast<size_t>(r)].data());
    }));
    for (size_t i = 0; i < rows; ++i) {
      uint64_t best = 0;
      for (const auto& rank_keys : keys) best = std::max(best, rank_keys[i]);
      ids[i] = kernels::cuda::ArgmaxKeyIndex(best);
    }
    return Status::Ok();
  }
  Status ForwardTopK(std::span<const BatchSegment> batch, KvMemory& kv, int k, int32_t* ids,
                     float* values) override {
    if (k < 1 || k > std::min(kMaxTopK, n_vocab()))
      return Status::InvalidArgument("top-k of logits rows needs k in [1, " +
                                     std::to_string(std::min(kMaxTopK, n_vocab())) + "], got " +
                                     std::to_string(k));
    const size_t rows = OutputRows(batch);
    // Rank r's k_r = min(k, its slice) best of each row.
    std::vector<int> ks(static_cast<size_t>(size()));
    std::vector<std::vector<int32_t>> top_ids(ks.size());
    std::vector<std::vector<float>> top_values(ks.size());
    BRAID_RETURN_IF_ERROR(Each(kv, [&](CudaRank& b, KvMemory& part, int r) {
      const size_t i = static_cast<size_t>(r);
      ks[i] = std::min(k, b.vocab_end() - b.vocab_begin());
      top_ids[i].resize(std::max<size_t>(1, rows * ks[i]));
      top_values[i].resize(top_ids[i].size());
      return b.ForwardTopK(batch, part, ks[i], top_ids[i].data(), top_values[i].data());
    }));
    std::vector<std::pair<float, int32_t>> cand;
    for (size_t row = 0; row < rows; ++row) {
      cand.clear();
      bool finite = true;
      for (size_t r = 0; r < ks.size(); ++r) {
        const size_t kr = static_cast<size_t>(ks[r]);
        finite &= top_ids[r][row * kr] >= 0;
        for (size_t j = 0; j < kr; ++j)
          cand.emplace_back(top_values[r][row * kr + j], top_ids[r][row * kr + j]);
      }
      int32_t* out_ids = ids + row * static_cast<size_t>(k);
      float* out_values = values + row * static_cast<size_t>(k);
      if (!finite) {
        std::fill_n(out_ids, k, -1);
        std::fill_n(out_values, k, 0.0f);
        continue;
      }
      // The ranks' slices are disjoint and together hold at least k ids.
      std::partial_sort(cand.begin(), cand.begin() + k, cand.end(),
                        [](const auto& a, const auto& b) {
                          return a.first > b.first || (a.first == b.first && a.second < b.second);
                        });
      for (int j = 0; j < k; ++j) out_ids[j] = cand[j].second, out_values[j] = cand[j].first;
    }
    return Status::Ok();
  }
  Status Prepare(KvMemory& kv, int max_batch) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto& parts = static_cast<TpKv&>(kv).parts;
    return threads_.RunAll([&](int r) {
      return ranks_[static_cast<size_t>(r)]->Prepare(*parts[static_cast<size_t>(r)], max_batch);
    });
  }
  void Describe(ModelInfo* info) const override {
    ranks_[0]->Describe(info);
    info->isa += "; tensor parallel over " + std::to_string(size()) + " GPUs (" + name() + ", " +
                 (nccl_ ? nccl_->version() + ", " + nccl_->rank(0).buffers()
                        : std::string("caller's collective")) +
                 "), the output head split by vocabulary, figures per GPU";
  }
  void CascadeCounts(uint64_t* passes, uint64_t* tokens) const override {
    ranks_[0]->CascadeCounts(passes, tokens);
  }

 private:
  int size() const { return static_cast<int>(devices_.size()); }
  // Logits rows a batch returns.
  static size_t OutputRows(std::span<const BatchSegment> batch) {
    size_t rows = 0;
    for (const BatchSegment& s : batch)
      rows += static_cast<size_t>(std::clamp(s.pos0 + s.n_tokens - s.logits_from, 0, s.n_tokens));
    return rows;
  }
  // fn(rank r's backend, its KV memory, r) on every rank at once: the
  // same batch, so that the ranks' collectives come in the same order.
  Status Each(KvMemory& kv, const std::function<Status(CudaRank&, KvMemory&, int)>& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& parts = static_cast<TpKv&>(kv).parts;  // allocated by AllocateKv of this backend
    return threads_.RunAll([&](int r) -> Status {
      return fn(*ranks_[static_cast<size_t>(r)], *parts[static_cast<size_t>(r)], r);
    });
  }

  std::vector<int> devices_;
  std::unique_ptr<NcclGroup> nccl_;  // null when the caller owns the collectives
  std::vector<std::unique_ptr<CudaRank>> ranks_;
  RankThreads threads_;
  std::mutex mu_;
};

Status CheckDevices(const std::vector<int>& devices) {
  if (devices.empty()) return Status::InvalidArgument("tensor parallelism needs a GPU");
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (devices[i] == devices[j])
        return Status::InvalidArgument("tensor parallelism: GPU " + std::to_string(devices[i]) +
                                       " is listed twice");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Backend>> OpenTensorParallelBackend(const ModelFile& file,
                                                           const ModelOptions& options,
                                                           const std::vector<int>& devices,
                                                           int context) {
  BRAID_RETURN_IF_ERROR(CheckDevices(devices));
  const int count = CudaDeviceCount();
  for (int d : devices)
    if (d >= count)
      return Status::InvalidArgument("cuda:" + std::to_string(d) + " does not exist (" +
                                     std::to_string(count) + " device(s))");
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<NcclGroup> nccl, NcclGroup::Open(devices));
  std::vector<Collective*> ranks;
  for (size_t r = 0; r < devices.size(); ++r) ranks.push_back(&nccl->rank(static_cast<int>(r)));
  auto b = std::make_unique<TpBackend>(devices, std::move(nccl));
  BRAID_RETURN_IF_ERROR(b->Open(file, options, context, ranks));
  return std::unique_ptr<Backend>(std::move(b));
}

Result<std::unique_ptr<Backend>> OpenTensorParallelBackend(const ModelFile& file,
                                                           const ModelOptions& options,
                                                           const std::vector<int>& devices,
                                                           int context,
                                                           const std::vector<Collective*>& ranks) {
  if (ranks.size() != devices.size())
    return Status::InvalidArgument("tensor parallelism: one collective per device");
  auto b = std::make_unique<TpBackend>(devices, nullptr);
  BRAID_RETURN_IF_ERROR(b->Open(file, options, context, ranks));
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace braid
