// libFuzzer target: GgufFile::Parse over arbitrary bytes. Any input must give
// either a Status or a file whose every tensor lies inside the input; the
// loop below touches each tensor's first and last byte so that AddressSanitizer
// catches a tensor that does not.
#include <cstddef>
#include <cstdint>

#include "model/gguf_reader.h"
#include "model/mapped_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = braid::GgufFile::Parse(braid::MappedFile::Borrow("fuzz.gguf", data, size));
  if (!file.ok()) return 0;
  const braid::GgufFile& g = *file.value();
  volatile uint8_t sink = 0;
  for (const braid::TensorInfo& t : g.tensors()) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    if (t.nbytes > 0) sink = sink ^ p[0] ^ p[t.nbytes - 1];
    (void)t.elements();
  }
  // Exercise the typed getters on every key.
  for (const auto& [key, value] : g.metadata()) {
    (void)g.GetUInt(key);
    (void)g.GetInt(key);
    (void)g.GetFloat(key);
    (void)g.GetBool(key);
    (void)g.GetString(key);
    (void)g.GetStringArray(key);
    (void)g.GetIntArray(key);
    (void)g.GetFloatArray(key);
  }
  return 0;
}
