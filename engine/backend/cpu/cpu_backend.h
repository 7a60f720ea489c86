// The CPU backend: the Llama-family forward pass (llama_forward.h) on a
// thread pool of its own, over the weights as views into the mapped file
// (llama_weights.h; interleaved copies on the fast path), with KV memory in
// host RAM (kv_store.h). Options: ModelOptions::threads and ::cpu.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace braid {

// Opens the CPU backend for the model in `file` (which must outlive it) with
// sequences of up to `context` positions: builds the weights' views, starts
// options.threads threads (0: DefaultCpuThreads()) and, on the fast path, chooses
// how decode streams the weights (CpuOptions::stream; timing both variants
// takes a few decode steps). Errors: a tensor type without a matmul kernel,
// a malformed BRAID_STREAM.
Result<std::unique_ptr<Backend>> OpenCpuBackend(const ModelFile& file, const ModelOptions& options,
                                                int context);

}  // namespace braid
