// Mistral: the Llama block unchanged (grouped-query attention, no biases).
// config.json's sliding_window, where set (7B v0.1: 4096), makes every layer
// attend to that many positions; GGUF files do not carry it.
#include "model/family.h"

namespace braid {
namespace {
constexpr std::string_view kHfTypes[] = {"mistral"};
}  // namespace

const Family& MistralFamily() {
  static const Family f{
      .arch = Arch::kMistral,
      .gguf_arch = "mistral",
      .hf_model_types = kHfTypes,
      .qkv_bias = false,
      .gguf_rope_neox = false,
      .globals = LlamaGlobalTensors(),
      .layer = LlamaLayerTensors(),
      .hf_window_all_layers = true,
  };
  return f;
}

}  // namespace braid
