// Qwen2 and Qwen2.5: the Llama block with biases on the Q, K and V
// projections; GGUF files keep the Hugging Face Q/K layout and rotate split
// halves.
#include "model/family.h"

namespace braid {
namespace {
constexpr std::string_view kHfTypes[] = {"qwen2"};
}  // namespace

const Family& Qwen2Family() {
  static const Family f{
      .arch = Arch::kQwen2,
      .gguf_arch = "qwen2",
      .hf_model_types = kHfTypes,
      .qkv_bias = true,
      .gguf_rope_neox = true,
      .globals = LlamaGlobalTensors(),
      .layer = LlamaLayerTensors(),
  };
  return f;
}

}  // namespace braid
