// Options shared by every subcommand that opens a model.
#pragma once

#include <string>

#include "cli/args.h"
#include "engine/model.h"

namespace braid::cli {

// -m/--model (default: the bundled model), -t/--threads, --ctx, --exact,
// --precision split16|int8, --kv f16|f32|q8.
ModelOptions ReadModelOptions(Args& args);
void PrintModelInfo(const ModelInfo& info);

}  // namespace braid::cli
