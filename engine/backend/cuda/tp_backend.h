// Tensor parallelism: one model over several GPUs of this host, as one
// Backend. Each GPU holds a rank (OpenCudaBackendRank): its share of the
// attention heads, the KV heads (so the KV pool is split by heads too) and
// the MLP columns, and the residual stream is summed over the ranks after
// the attention output and the down projection (two NCCL all-reduces per
// layer, captured into the decode graphs with the rest).
//
// One host thread per GPU, all in this process, driven by the one step
// loop: a forward pass hands the same batch to every rank's thread (rank 0
// on the caller's) and returns when all are done. The output head's rows
// are split by vocabulary (the embedding is whole on each GPU): each rank
// computes its slice's logits and their argmax or top k, and the slices
// meet on the host (the largest argmax key, the best k candidates, each
// rank's columns of the logits), a few bytes a row where an all-gather of
// whole rows would move megabytes. One process per GPU would need the
// batch sent between processes each step; threads share it in memory.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"

namespace braid {

class Collective;

// Over `devices` (two or more distinct GPUs; one runs the same path with a
// group of one) with NCCL. Errors: NCCL missing, a model whose KV heads or
// MLP columns do not split evenly, the ranks' own.
Result<std::unique_ptr<Backend>> OpenTensorParallelBackend(const ModelFile& file,
                                                           const ModelOptions& options,
                                                           const std::vector<int>& devices,
                                                           int context);

// As above, over collectives the caller made and keeps alive (ranks[r] is
// rank r's side, on devices[r]).
Result<std::unique_ptr<Backend>> OpenTensorParallelBackend(const ModelFile& file,
                                                           const ModelOptions& options,
                                                           const std::vector<int>& devices,
                                                           int context,
                                                           const std::vector<Collective*>& ranks);

}  // namespace braid
