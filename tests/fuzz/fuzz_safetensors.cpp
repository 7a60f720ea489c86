// libFuzzer target: SafetensorsFile::Parse over arbitrary bytes (header
// length, JSON header, data). Any input must give either a Status or tensors
// that lie inside the input; touching each tensor's first and last byte lets
// AddressSanitizer catch one that does not. F8_E4M3 tensors then go through
// the FP8 checkpoints' dequantization (DequantizeFp8) with the scales the
// same file holds beside them, in blocks sized from the input's length.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/mapped_file.h"
#include "model/model_file.h"
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
  auto find = [&](const std::string& name) { return file.value()->FindTensor(name); };
  const int64_t block_rows = 1 + static_cast<int64_t>(size % 5);
  const int64_t block_cols = 1 + static_cast<int64_t>(size / 5 % 7);
  for (const braid::TensorInfo& t : file.value()->tensors()) {
    if (t.type != braid::kernels::DType::kF8_E4M3 || t.elements() > (int64_t{1} << 20)) continue;
    std::vector<float> out;
    (void)braid::DequantizeFp8(t, t.name, block_rows, block_cols, find, "fuzz", &out);
  }
  return 0;
}
