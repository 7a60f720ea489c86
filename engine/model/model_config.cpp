#include "model/model_config.h"

namespace braid {

const char* ArchName(Arch a) {
  switch (a) {
    case Arch::kLlama:
      return "llama";
    case Arch::kMistral:
      return "mistral";
    case Arch::kQwen2:
      return "qwen2";
  }
  return "unknown";
}

}  // namespace braid
