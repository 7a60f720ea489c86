// The CUDA backend: a model's block (model/block.h), planned into this
// backend's steps, on one NVIDIA GPU (sm_90).
//   weights  bf16 in device memory (bf16 checkpoints as they are; fp16, fp32
//            and GGUF quantized tensors converted at load), Q/K/V and
//            gate/up concatenated so that each is one GEMM
//   GEMMs    cuBLASLt, bf16 inputs, fp32 accumulate and output; Wo and down
//            add into the fp32 residual stream through the GEMM's beta
//   KV       bf16 paged blocks ([block][kv_head][slot][head_dim] per layer)
//   attention  single-token queries (decode) through a split-K paged kernel;
//            prefill chunks through two batched GEMMs around a causal softmax;
//            decode tokens sharing a cached prefix attend it once per group
//            through the same GEMMs (cascade), merged by log-sum-exp
//   decode   batches of single-token segments replayed as CUDA graphs at
//            bucketed batch sizes (a graph per bucket, captured on first use)
//   several GPUs  tensor parallel ranks (OpenCudaBackendRank): each holds
//            its share of the heads, MLP columns and output head rows, and
//            an NCCL all-reduce sums the residual stream after Wo and after
//            down
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"

namespace braid {

Result<std::unique_ptr<Backend>> OpenCudaBackend(const ModelFile& file, const ModelOptions& options,
                                                 int device, int context);

class Collective;

// One rank of a tensor-parallel group (engine/backend/cuda/tp_backend.h
// drives the ranks): the heads, KV heads and MLP columns of rank
// group.rank() of group.size(), the residual stream summed over the group
// after Wo and down, and a slice of the output head's rows (the
// vocabulary split in equal slices, multiples of 64, the last what is
// left). Every rank's forward pass must run at the same time as the
// others', with the same batch. Its outputs are of its slice: Forward
// writes the slice's columns of each n_vocab()-wide row and no others;
// ForwardArgmax gives the slice's argmax, ForwardTopK the slice's k largest
// (k up to min(kMaxTopK, the slice)), ids of the whole vocabulary.
class CudaRank : public Backend {
 public:
  // The slice: ids [vocab_begin(), vocab_end()).
  virtual int vocab_begin() const = 0;
  virtual int vocab_end() const = 0;
  // As ForwardArgmax, each row's key (kernels::cuda::ArgmaxRows) instead:
  // the largest of the ranks' keys is the row's argmax over the whole
  // vocabulary (kernels::cuda::ArgmaxKeyIndex).
  virtual Status ForwardArgmaxKeys(std::span<const BatchSegment> batch, KvMemory& kv,
                                   uint64_t* keys) = 0;
};
Result<std::unique_ptr<CudaRank>> OpenCudaBackendRank(const ModelFile& file,
                                                      const ModelOptions& options, int device,
                                                      int context, Collective& group);

// The model's block in this backend's steps: Unsupported, naming the op,
// where they do not cover it (needs no device).
Status PlanCudaBlock(const ModelConfig& config);

// CUDA devices present (0 when there is no driver or no device).
int CudaDeviceCount();

// Device-to-device copy bandwidth of `device` in GB/s (bytes read + written),
// the median of several copies of a buffer far larger than the L2 cache.
Result<double> MeasureCudaCopyBandwidth(int device);

// The bf16 GEMM rate of `device` in operations/second (a multiply-add is 2):
// the best of several 4096 x 4096 x 8192 products through the backend's
// cuBLASLt settings (bf16 inputs, fp32 accumulate and output).
Result<double> MeasureCudaGemmRate(int device);

// Seconds of the GEMMs of one decode step of `m` tokens on a model of
// config `c` (every layer's Q/K/V, Wo, gate/up and down, and the head) with
// the backend's cuBLASLt settings, on random bf16 weights, replayed as one
// CUDA graph: the rate that cuBLAS alone would allow (the median of 5
// replays after one warm-up).
Result<double> MeasureGemmSeconds(const ModelConfig& c, int m, int device);

}  // namespace braid
