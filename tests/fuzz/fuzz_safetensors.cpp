// libFuzzer target: SafetensorsFile::Parse over arbitrary bytes (header
// length, JSON header, data). Any input must give either a Status or tensors
// that lie inside the input; touching each tensor's first and last byte lets
// AddressSanitizer catch one that does not.
#include <cstddef>
#include <cstdint>

#include "model/mapped_file.h"
#include "model/safetensors_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file =
      braid::SafetensorsFile::Parse(braid::MappedFile::Borrow("fuzz.safetensors", data, size));
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const braid::TensorInfo& t : file.value()->tensors()) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    if (t.nbytes > 0) sink = sink ^ p[0] ^ p[t.nbytes - 1];
    (void)t.elements();
  }
  return 0;
}
