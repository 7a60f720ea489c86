#include "model/model_config.h"

#include "model/family.h"

namespace braid {

const char* ArchName(Arch a) {
  const Family* f = FindFamily(a);
  return f != nullptr ? f->gguf_arch : "unknown";
}

}  // namespace braid
