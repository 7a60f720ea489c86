// Options shared by every subcommand that opens a model.
#pragma once

#include <string>

#include "cli/args.h"
#include "engine/model.h"

namespace braid::cli {

// Bounds of the shared numeric options (the engine's own limit for threads;
// a context of 128 Ki tokens is the longest that common models are trained
// for, and already gigabytes of KV cache per sequence).
inline constexpr long long kMaxThreads = 1024;
inline constexpr long long kMaxContext = 131072;
inline constexpr long long kMaxTensorParallel = 64;

// -m/--model (default: the bundled model), --tokenizer PATH, --device cpu|cuda[:N[+M..]],
// --tp N (GPUs per model among those --device lists), -t/--threads,
// --ctx, --exact, --precision split16|int8, --kv f16|f32|q8|fp8, --stream auto|nt|t0.
ModelOptions ReadModelOptions(Args& args);
void PrintModelInfo(const ModelInfo& info);

}  // namespace braid::cli
