// The compute seam of the engine: a Backend runs a model's forward pass over
// a ragged batch on one device and owns the KV memory it reads and writes.
// Everything above it (Model, Generate, the serving engine's scheduler, the
// radix cache and the block pool) is the same for every backend; only the
// arithmetic and where the numbers live differ.
//
// Backends: "cpu" (engine/backend/cpu: the thread-pool forward pass over
// GGUF or safetensors weights) and "cuda[:N]" (engine/backend/cuda: bf16
// weights in device memory, cuBLASLt GEMMs, paged attention, CUDA graphs),
// built when nvcc is found.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/model.h"
#include "engine/open.h"
#include "engine/status.h"
#include "model/model_config.h"
#include "model/model_file.h"

namespace braid {

// One sequence's share of a batch.
struct BatchSegment {
  static constexpr int kNoLogits = 1 << 30;
  const int32_t* tokens = nullptr;  // the new tokens
  int n_tokens = 0;
  int pos0 = 0;  // position of tokens[0]; positions < pos0 are in the KV memory
  const int32_t* block_table = nullptr;  // blocks holding positions [0, pos0 + n_tokens)
  // With slides (KvMemory::n_slides): per entry of block_table its slide,
  // where the sliding layers' share of the block lies; only the entries a
  // query's window reads need be current.
  const int32_t* slide_table = nullptr;
  // Logits rows are produced for the new tokens at positions >= logits_from:
  // pos0 + n_tokens - 1 for the last token only, pos0 for all, kNoLogits for none.
  int logits_from = kNoLogits;
};

// KV memory of a fixed number of blocks of block_size token slots (every
// layer's K and V), in whatever layout and place its backend chose. The
// scheduler decides which blocks a sequence uses (its block table); this
// object only holds the numbers.
class KvMemory {
 public:
  virtual ~KvMemory() = default;
  virtual int n_blocks() const = 0;
  virtual int block_size() const = 0;
  // Slides kept for a hybrid model's sliding layers (Backend::AllocateKv
  // with slides); 0: every layer's share of a block is in the block.
  virtual int n_slides() const { return 0; }
  virtual size_t bytes() const = 0;

  // Moving whole blocks to and from host memory (the lower KV tier,
  // engine/kv/kv_tier.h). A block's numbers travel as block_bytes() bytes in
  // a layout of the backend's choosing that CopyIn reads back exactly.
  virtual size_t block_bytes() const = 0;
  // Readies host memory [p, p + bytes) for the copies below: a device backend
  // page-locks it so that they run at full bandwidth and asynchronously.
  // UnregisterHost(p) before the memory goes.
  virtual Status RegisterHost(void* p, size_t bytes) { return Status::Ok(); }
  virtual void UnregisterHost(void* p) {}
  // Copies blocks[i] to dst[i], after every forward pass so far and before
  // any later one writes those blocks. CopyIn copies src[i] into blocks[i].
  // Copies run in the order they are asked for, each after the forward
  // passes before it; a device backend runs them on a stream of their own,
  // so that a forward pass overlaps the copies it does not wait for. Each
  // returns a fence: WaitCopies(fence) makes every later forward pass wait
  // for the copies up to it (a host backend copies at once: fences are
  // always passed). The host memory must stay as it is until the copy
  // passed (CopiesDone).
  virtual Result<uint64_t> CopyOut(std::span<const int32_t> blocks,
                                   std::span<uint8_t* const> dst) = 0;
  virtual Result<uint64_t> CopyIn(std::span<const uint8_t* const> src,
                                  std::span<const int32_t> blocks) = 0;
  virtual Status WaitCopies(uint64_t fence) { return Status::Ok(); }
  // Whether the copies up to `fence` are done (polls; never blocks).
  virtual bool CopiesDone(uint64_t fence) { return true; }
  // Seconds the copy that returned `fence` took once it is done (a device
  // backend times it on its copy stream), and forgets it; -1 while it runs.
  virtual double TakeCopySeconds(uint64_t fence) = 0;
};

// What suits this device when the serving engine's options leave a choice
// open (EngineOptions fields at 0): tokens per step (the chunked prefill
// budget), sequences decoding together, and the share of
// KvMemoryAvailable() the KV pool takes.
struct ServingDefaults {
  int step_tokens = 256;
  int max_running = 64;
  double kv_memory_fraction = 0.3;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu" or "cuda:0".
  virtual std::string name() const = 0;
  // Logits per row.
  virtual int n_vocab() const = 0;
  // Most tokens one Forward takes (callers split longer inputs).
  virtual int max_chunk() const = 0;
  virtual ServingDefaults serving_defaults() const { return {}; }
  // Bytes of KV memory per block of `block_size` slots.
  virtual size_t KvBlockBytes(int block_size) const = 0;
  // Bytes the KV pool may take when sized from memory (the host's available
  // memory for the CPU, the device's free memory after the weights for CUDA).
  virtual uint64_t KvMemoryAvailable() const = 0;
  virtual Result<std::unique_ptr<KvMemory>> AllocateKv(int n_blocks, int block_size) = 0;
  // A hybrid model (some layers slide, some not): bytes per block of the
  // sliding layers' share when this backend can keep it apart, in slides
  // (kv::BlockPool), else 0. Then AllocateSlidedKv keeps the other layers
  // in n_blocks blocks and the sliding ones in n_slides slides
  // (KvBlockBytes - KvSlideBytes and KvSlideBytes bytes each), and
  // Forward reads each segment's slide_table for the sliding layers.
  virtual size_t KvSlideBytes(int block_size) const { return 0; }
  virtual Result<std::unique_ptr<KvMemory>> AllocateSlidedKv(int n_blocks, int n_slides,
                                                             int block_size) {
    return Status::Unsupported(name() + " keeps no slides");
  }
  // Evaluates every segment (total tokens <= max_chunk(), ids valid, block
  // tables long enough), writing K/V into `kv` (allocated by this backend).
  // Logits rows go to host memory `logits` in segment order: none, the last
  // token's, or every token's, as each segment asks ([rows, n_vocab] fp32).
  // Thread-safe: calls are serialised inside.
  virtual Status Forward(std::span<const BatchSegment> batch, KvMemory& kv, float* logits) = 0;
  // As Forward, but each logits row yields only the index of its largest
  // logit (the first on ties; greedy decoding) into `ids`, or -1 when the
  // row holds a NaN or an infinity. A device backend picks it where the
  // logits are and copies back one id per row.
  virtual Status ForwardArgmax(std::span<const BatchSegment> batch, KvMemory& kv, int32_t* ids);
  // As Forward, but each logits row yields only its k largest logits in
  // descending order (ties: the lower id first), into ids and values
  // ([rows, k] each); a row holding a NaN or an infinity gets ids[row * k] =
  // -1. k in [1, min(kMaxTopK, n_vocab())]. A sampler with top-k <= k draws
  // from these exactly as from the whole row; a device backend selects them
  // where the logits are and copies back 2k numbers per row.
  static constexpr int kMaxTopK = 64;
  virtual Status ForwardTopK(std::span<const BatchSegment> batch, KvMemory& kv, int k, int32_t* ids,
                             float* values);
  // Readies `kv` for serving up to `max_batch` sequences at once before the
  // first request: a device backend captures its decode graphs for every
  // batch size bucket now, so that no request pays for a capture. Writes
  // nothing a sequence reads.
  virtual Status Prepare(KvMemory& kv, int max_batch) { return Status::Ok(); }
  // Fills the backend's part of ModelInfo: isa (kernels and formats in use),
  // threads, stream, bytes_per_token and decode_stages where they differ.
  virtual void Describe(ModelInfo* info) const = 0;
  // CpuOptions::profile_stages: the decode-only passes timed so far
  // and per stage the seconds of each thread. Backends without a profile
  // leave both empty.
  virtual void StageProfile(uint64_t* passes, std::vector<EngineStats::StageTime>* stages) {
    *passes = 0;
    stages->clear();
  }
  // Shared-prefix (cascade) attention so far: the forward passes that used
  // it and the decode tokens that did (backends without it: 0, 0).
  virtual void CascadeCounts(uint64_t* passes, uint64_t* tokens) const {
    *passes = 0;
    *tokens = 0;
  }
  // CPU thread pool: its parallel forward passes so far, and how many of them
  // ran on fewer threads because the machine was oversubscribed
  // (CpuOptions::adapt_threads; others: 0, 0).
  virtual void PoolCounts(uint64_t* passes, uint64_t* narrowed) {
    *passes = 0;
    *narrowed = 0;
  }
};

// Parses ModelOptions::device: "cpu", "cuda" (= "cuda:0"), "cuda:N", or
// "cuda:N+M+..." (one model split over those GPUs: tensor parallelism).
struct DeviceSpec {
  enum class Kind { kCpu, kCuda } kind = Kind::kCpu;
  int index = 0;           // the GPU, or the group's first
  std::vector<int> group;  // a tensor-parallel group's GPUs, else empty
};
Result<DeviceSpec> ParseDevice(const std::string& device);

// ExpandDevices (a device list to each engine's device): engine/open.h.

// Opens the backend `options.device` names for the model in `file` (which
// must outlive it). Errors: an unknown device, a backend this build lacks
// ("this build has no CUDA backend"), a model config the backend does not
// support (named), a device that cannot be opened or is too small.
Result<std::unique_ptr<Backend>> OpenBackend(const ModelFile& file, const ModelOptions& options,
                                             int context);

}  // namespace braid
