#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>

#include "backend/cpu/kv_store.h"
#include "backend/cpu/llama_forward.h"
#include "backend/cpu/llama_weights.h"
#include "engine/system_probe.h"
#include "kernels/quant.h"
#include "kernels/stream.h"
#include "kernels/thread_pool.h"
#include "model/family.h"

namespace braid {
namespace {

constexpr int kMaxChunk = 256;  // tokens per forward pass
// The block size whose KV element type the description names: a Model
// sequence's, and the serving engine's default.
constexpr int kDescribeBlockSize = 16;

// KV memory in host RAM: a KvStore.
class CpuKvMemory final : public KvMemory {
 public:
  CpuKvMemory(const ModelConfig& c, int n_blocks, int block_size, kernels::KvType type,
              bool k_transposed, int n_slides = 0)
      : store_(c.n_layer, n_blocks, block_size, c.n_head_kv, c.head_dim, type, k_transposed,
               n_slides, c.sliding) {}
  int n_blocks() const override { return store_.n_blocks(); }
  int n_slides() const override { return store_.n_slides(); }
  int block_size() const override { return store_.block_size(); }
  size_t bytes() const override { return store_.bytes(); }
  KvStore& store() { return store_; }

  // Host memory holds the pool: copies are memcpy, done when they return.
  size_t block_bytes() const override { return store_.block_bytes(); }
  Result<uint64_t> CopyOut(std::span<const int32_t> blocks,
                           std::span<uint8_t* const> dst) override {
    return Copy(blocks.size(), [&](size_t i) { store_.CopyBlockOut(blocks[i], dst[i]); });
  }
  Result<uint64_t> CopyIn(std::span<const uint8_t* const> src,
                          std::span<const int32_t> blocks) override {
    return Copy(blocks.size(), [&](size_t i) { store_.CopyBlockIn(blocks[i], src[i]); });
  }
  double TakeCopySeconds(uint64_t fence) override {
    auto it = seconds_.find(fence);
    if (it == seconds_.end()) return 0;
    const double s = it->second;
    seconds_.erase(it);
    return s;
  }

 private:
  template <typename F>
  uint64_t Copy(size_t n, F&& one) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; ++i) one(i);
    seconds_[++fence_] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return fence_;
  }
  KvStore store_;
  uint64_t fence_ = 0;
  std::map<uint64_t, double> seconds_;  // copies whose time nobody took yet
};

// Measured choices of this process by (weight bytes per token, threads):
// what decides between the variants is how the working set compares with the
// caches the threads share.
struct MeasuredStream {
  kernels::StreamVariant choice;
  std::string note;
};
std::mutex g_stream_mu;
std::map<std::pair<uint64_t, int>, MeasuredStream> g_streams;

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelFile& file, const CpuOptions& options, int threads, int context,
             LlamaWeights weights)
      : config_(file.config()),
        options_(options),
        context_(context),
        weights_(std::move(weights)),
        pool_(std::make_unique<kernels::ThreadPool>(threads, options.adapt_threads)),
        forward_(std::make_unique<LlamaForward>(config_, weights_, *pool_, options, kMaxChunk,
                                                context)) {
    // Weight bytes a decode step reads, per matmul stage (threads split each
    // stage by rows, with a barrier between stages).
    auto add = [&](const kernels::MatrixView& w) {
      bytes_per_token_ += w.rows * w.row_bytes;
      decode_stages_.back() += w.rows * w.row_bytes;
    };
    for (const LayerWeights& l : weights_.layers) {
      for (const auto& stage : {std::vector<const kernels::MatrixView*>{&l.wq, &l.wk, &l.wv},
                                {&l.wo},
                                {&l.w_gate, &l.w_up},
                                {&l.w_down}}) {
        decode_stages_.push_back(0);
        for (const auto* w : stage) add(*w);
      }
    }
    decode_stages_.push_back(0);
    add(weights_.output);
    isa_ = options.exact
               ? std::string("fp32 (") + kernels::KernelIsa() + ")"
               : std::string(kernels::KernelIsa()) +
                     (options.precision == CpuOptions::Precision::kInt8 ? ", int8" : ", split16") +
                     " activations";
    switch (forward_->KvTypeFor(kDescribeBlockSize)) {
      case kernels::KvType::kF32:
        isa_ += ", fp32 KV";
        break;
      case kernels::KvType::kF16:
        isa_ += ", fp16 KV";
        break;
      case kernels::KvType::kQ8:
        isa_ += ", q8 KV";
        break;
    }
  }

  // The fast path's weight-streaming variant (CpuOptions::stream).
  Status Init() {
    if (options_.exact) return Status::Ok();
    BRAID_ASSIGN_OR_RETURN(stream_, ChooseStream(options_.stream));
    return Status::Ok();
  }

  std::string name() const override { return "cpu"; }
  int n_vocab() const override { return config_.n_vocab; }
  int max_chunk() const override { return forward_->max_chunk(); }
  size_t KvBlockBytes(int block_size) const override {
    return KvStore::BlockBytes(config_.n_layer, block_size, config_.n_head_kv, config_.head_dim,
                               forward_->KvTypeFor(block_size));
  }
  uint64_t KvMemoryAvailable() const override { return AvailableMemoryBytes(); }

  Result<std::unique_ptr<KvMemory>> AllocateKv(int n_blocks, int block_size) override {
    return AllocateSlidedKv(n_blocks, 0, block_size);
  }
  // A hybrid model's sliding layers' share of a block.
  size_t KvSlideBytes(int block_size) const override {
    const int sliding = config_.PartlySlidingLayers();
    if (sliding == 0) return 0;
    return KvStore::BlockBytes(sliding, block_size, config_.n_head_kv, config_.head_dim,
                               forward_->KvTypeFor(block_size));
  }
  Result<std::unique_ptr<KvMemory>> AllocateSlidedKv(int n_blocks, int n_slides,
                                                     int block_size) override {
    if (n_blocks < 1 || block_size < 1)
      return Status::InvalidArgument("KV memory needs at least one block of one slot, got " +
                                     std::to_string(n_blocks) + " blocks of " +
                                     std::to_string(block_size));
    if (n_slides > 0 && KvSlideBytes(block_size) == 0)
      return Status::InvalidArgument("slides are for models whose layers partly slide");
    return std::unique_ptr<KvMemory>(new CpuKvMemory(config_, n_blocks, block_size,
                                                     forward_->KvTypeFor(block_size),
                                                     forward_->KTransposed(block_size), n_slides));
  }

  Status Forward(std::span<const BatchSegment> batch, KvMemory& kv, float* logits) override {
    auto* cpu_kv = dynamic_cast<CpuKvMemory*>(&kv);
    if (cpu_kv == nullptr)
      return Status::InvalidArgument("the KV memory was not allocated by the CPU backend");
    int64_t tokens = 0;
    for (const BatchSegment& s : batch) {
      tokens += s.n_tokens;
      if (cpu_kv->n_slides() > 0 && s.slide_table == nullptr)
        return Status::InvalidArgument(
            "the KV memory keeps slides: every segment needs its slide table");
    }
    if (tokens > max_chunk())
      return Status::InvalidArgument("a batch of " + std::to_string(tokens) +
                                     " tokens exceeds the backend's " +
                                     std::to_string(max_chunk()));
    std::lock_guard<std::mutex> lock(forward_mu_);
    forward_->Forward(batch, cpu_kv->store(), logits);
    return Status::Ok();
  }

  void Describe(ModelInfo* info) const override {
    info->isa = isa_;
    info->threads = pool_->capacity();
    info->stream = stream_;
    info->bytes_per_token = bytes_per_token_;
    info->decode_stages = decode_stages_;
  }

  void PoolCounts(uint64_t* passes, uint64_t* narrowed) override {
    std::lock_guard<std::mutex> lock(forward_mu_);  // the pool's counts belong to Forward's thread
    const kernels::ThreadPool::Stats s = pool_->stats();
    *passes = s.runs;
    *narrowed = s.narrowed_runs;
  }

  void StageProfile(uint64_t* passes, std::vector<EngineStats::StageTime>* stages) override {
    std::lock_guard<std::mutex> lock(forward_mu_);
    *passes = forward_->profiled_passes();
    stages->clear();
    for (int s = 0; s < LlamaForward::kStages; ++s) {
      EngineStats::StageTime st{LlamaForward::StageName(s), {}};
      for (int t = 0; t < pool_->capacity(); ++t)
        st.seconds.push_back(forward_->stage_seconds(t)[s]);
      stages->push_back(std::move(st));
    }
  }

 private:
  Result<std::string> ChooseStream(CpuOptions::Stream option);
  double StepSeconds(KvMemory& kv, int warm, int steps);

  const ModelConfig& config_;
  const CpuOptions options_;
  const int context_;
  LlamaWeights weights_;
  std::unique_ptr<kernels::ThreadPool> pool_;
  std::unique_ptr<LlamaForward> forward_;
  std::mutex forward_mu_;  // one Forward at a time: one pool, one set of buffers
  std::string isa_, stream_;
  uint64_t bytes_per_token_ = 0;
  std::vector<uint64_t> decode_stages_;
};

// Median seconds of `steps` single-token steps (after `warm` untimed ones)
// from position 0, on KV memory of one block.
double CpuBackend::StepSeconds(KvMemory& kv, int warm, int steps) {
  std::vector<double> ts;
  std::vector<float> logits(config_.n_vocab);
  const int32_t id = 0, block = 0;
  for (int i = 0; i < warm + steps; ++i) {
    BatchSegment seg;
    seg.tokens = &id;
    seg.n_tokens = 1;
    seg.pos0 = i;
    seg.block_table = &block;
    seg.logits_from = i;
    const auto t0 = std::chrono::steady_clock::now();
    if (!Forward(std::span<const BatchSegment>(&seg, 1), kv, logits.data()).ok())
      return std::numeric_limits<double>::infinity();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (i >= warm) ts.push_back(dt.count());
  }
  std::nth_element(ts.begin(), ts.begin() + ts.size() / 2, ts.end());
  return ts[ts.size() / 2];
}

// Sets the weight-streaming variant (kernels/stream.h) and says how it was
// chosen: forced by the options or BRAID_STREAM, else measured on this model
// (once per process for its size and thread count) on a short sequence of
// its own: two rounds, each 1 + 3 single-token steps under each variant in
// turn; the variant with the lower best-round median step time is kept (the
// non-temporal one on a tie within 1%).
Result<std::string> CpuBackend::ChooseStream(CpuOptions::Stream option) {
  using kernels::StreamVariant;
  if (option == CpuOptions::Stream::kAuto) {
    if (const char* env = std::getenv("BRAID_STREAM");
        env != nullptr && std::string(env) != "auto") {
      StreamVariant v;
      if (!kernels::ParseStreamVariant(env, &v))
        return Status::InvalidArgument(std::string("BRAID_STREAM must be nt, t0 or auto, got '") +
                                       env + "'");
      kernels::SetStreamVariant(v);
      return std::string(kernels::StreamVariantName(v)) + " (forced by BRAID_STREAM)";
    }
  } else {
    const StreamVariant v = option == CpuOptions::Stream::kTemporal ? StreamVariant::kTemporal
                                                                    : StreamVariant::kNonTemporal;
    kernels::SetStreamVariant(v);
    return std::string(kernels::StreamVariantName(v)) + " (forced)";
  }
  std::lock_guard<std::mutex> lock(g_stream_mu);
  const auto key = std::make_pair(bytes_per_token_, pool_->capacity());
  auto it = g_streams.find(key);
  if (it == g_streams.end()) {
    constexpr int kWarm = 1, kSteps = 3, kRounds = 2;
    if (context_ < kWarm + kSteps) {
      kernels::SetStreamVariant(StreamVariant::kNonTemporal);
      return std::string("nt (default: the context is too short to time decode)");
    }
    // A KV cache of just those positions.
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<KvMemory> kv, AllocateKv(1, kDescribeBlockSize));
    const StreamVariant variants[2] = {StreamVariant::kNonTemporal, StreamVariant::kTemporal};
    double best[2] = {std::numeric_limits<double>::infinity(),
                      std::numeric_limits<double>::infinity()};
    for (int r = 0; r < kRounds; ++r)
      for (int v = 0; v < 2; ++v) {
        kernels::SetStreamVariant(variants[v]);
        best[v] = std::min(best[v], StepSeconds(*kv, kWarm, kSteps));
      }
    MeasuredStream m;
    m.choice = best[1] < 0.99 * best[0] ? StreamVariant::kTemporal : StreamVariant::kNonTemporal;
    char note[160];
    std::snprintf(note, sizeof note, "measured: nt %.2f, t0 %.2f ms/token", 1e3 * best[0],
                  1e3 * best[1]);
    m.note = note;
    it = g_streams.emplace(key, std::move(m)).first;
  }
  kernels::SetStreamVariant(it->second.choice);
  return std::string(kernels::StreamVariantName(it->second.choice)) + " (" + it->second.note + ")";
}

}  // namespace

Result<std::unique_ptr<Backend>> OpenCpuBackend(const ModelFile& file, const ModelOptions& options,
                                                int context) {
  // The ops' features this backend implements (family.h), and the model's
  // block in its steps.
  static constexpr std::string_view kOps[] = {"qkv_bias",   "gelu_tanh",      "embed_scale",
                                              "attn_scale", "sliding_window", "rope_llama3"};
  BRAID_RETURN_IF_ERROR(CheckOps(file.config(), context, kOps, "the CPU backend"));
  BRAID_RETURN_IF_ERROR(LlamaForward::Plan(file.config()).status());
  if (options.weights == ModelOptions::Weights::kFp8)
    return Status::Unsupported(
        "FP8 weights (--weights fp8) run on the CUDA backend only; the CPU reads the file's "
        "own types (--device cuda, or leave --weights out)");
  if (options.kv_cache == ModelOptions::KvCache::kFp8)
    return Status::Unsupported(
        "an FP8 KV cache (--kv fp8) is the CUDA backend's; the CPU keeps f16, q8 or f32 "
        "(--device cuda, or --kv f16|q8|f32)");
  BRAID_ASSIGN_OR_RETURN(LlamaWeights weights, BuildLlamaWeights(file));
  if (!options.cpu.exact) InterleaveForFastPath(&weights);
  const int threads = options.threads > 0 ? options.threads : DefaultCpuThreads();
  CpuOptions cpu = options.cpu;
  if (options.threads == 0) cpu.adapt_threads = true;
  auto backend = std::make_unique<CpuBackend>(file, cpu, threads, context, std::move(weights));
  BRAID_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace braid
