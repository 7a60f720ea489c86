#include "cli/model_options.h"

#include <cstdio>
#include <filesystem>

#include "engine/open.h"

namespace braid::cli {

namespace {
// The bundled model: models/ under the working directory, else the path the
// build was configured with.
std::string DefaultModel() {
  const char* rel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::error_code ec;
  if (std::filesystem::exists(rel, ec)) return rel;
  return BRAID_DEFAULT_MODEL;
}
}  // namespace

ModelOptions ReadModelOptions(Args& args) {
  ModelOptions o;
  o.path = args.Str({"-m", "--model"}, DefaultModel());
  o.tokenizer = args.Str({"--tokenizer"}, "");
  o.device = args.Str({"--device"}, "cpu");
  o.tensor_parallel = static_cast<int>(args.Int({"--tp"}, 1, 1, kMaxTensorParallel));
  if (auto d = ExpandDevices(o.device, o.tensor_parallel); !d.ok()) {
    args.Fail("--device: " + d.status().message());
  } else if (o.tensor_parallel > 1 && d.value().size() == 1) {
    o.device = d.value()[0];  // one group: cuda:0,1 with --tp 2 is cuda:0+1
  }
  o.threads = static_cast<int>(args.Int({"-t", "--threads"}, 0, 0, kMaxThreads));
  o.context = static_cast<int>(args.Int({"--ctx"}, 0, 0, kMaxContext));
  o.cpu.exact = args.Flag({"--exact"});
  const std::string p = args.Str({"--precision"}, "split16");
  if (p == "int8") {
    o.cpu.precision = CpuOptions::Precision::kInt8;
  } else if (p != "split16") {
    args.Fail("--precision must be split16 or int8, not '" + p + "'");
  }
  const std::string kv = args.Str({"--kv"}, "f16");
  if (kv == "f32") {
    o.cpu.kv_cache = CpuOptions::KvCache::kF32;
  } else if (kv == "q8") {
    o.cpu.kv_cache = CpuOptions::KvCache::kQ8;
  } else if (kv == "fp8") {
    o.kv_cache = ModelOptions::KvCache::kFp8;
  } else if (kv != "f16") {
    args.Fail("--kv must be f16, f32, q8 or fp8, not '" + kv + "'");
  }
  const std::string w = args.Str({"--weights"}, "bf16");
  if (w == "fp8") {
    o.weights = ModelOptions::Weights::kFp8;
  } else if (w != "bf16") {
    args.Fail("--weights must be bf16 or fp8, not '" + w + "'");
  }
  const std::string st = args.Str({"--stream"}, "auto");
  if (st == "nt") {
    o.cpu.stream = CpuOptions::Stream::kNonTemporal;
  } else if (st == "t0") {
    o.cpu.stream = CpuOptions::Stream::kTemporal;
  } else if (st != "auto") {
    args.Fail("--stream must be auto, nt or t0, not '" + st + "'");
  }
  return o;
}

void PrintModelInfo(const ModelInfo& i) {
  std::fprintf(stderr,
               "model: %s\n  arch %s, %d layers, n_embd %d, heads %d/%d, vocab %d, context %d "
               "(trained %d)\n  %.1f M parameters, weights %.1f MB (%s)\n  device %s, kernels %s, "
               "%d threads\n%s%s%s",
               i.path.c_str(), i.arch.c_str(), i.n_layer, i.n_embd, i.n_head, i.n_head_kv,
               i.n_vocab, i.context, i.n_ctx_train, i.n_params / 1e6, i.weight_bytes / 1e6,
               i.weight_types.c_str(), i.device.c_str(), i.isa.c_str(), i.threads,
               i.stream.empty() ? "" : "  weight stream ", i.stream.c_str(),
               i.stream.empty() ? "" : "\n");
}

}  // namespace braid::cli
