// DequantizeRow against values from the `gguf` Python package
// (tests/fixtures/dequant, made by scripts/reference/make_dequant_fixtures.py).
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/quant.h"

namespace braid::kernels {
namespace {

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

TEST_CASE("DequantizeRow matches gguf.quants.dequantize bit for bit") {
  const std::string dir = std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/dequant/";
  const std::pair<const char*, DType> cases[] = {
      {"f32", DType::kF32},   {"f16", DType::kF16},   {"bf16", DType::kBF16},
      {"q8_0", DType::kQ8_0}, {"q4_0", DType::kQ4_0}, {"q4_1", DType::kQ4_1},
      {"q4_K", DType::kQ4_K}, {"q6_K", DType::kQ6_K}, {"q5_0", DType::kQ5_0},
  };
  for (const auto& [name, type] : cases) {
    INFO("fixture " << name);
    const std::vector<uint8_t> raw = ReadFile(dir + name + ".raw");
    const std::vector<uint8_t> want = ReadFile(dir + name + ".f32");
    REQUIRE(!raw.empty());
    REQUIRE(want.size() % 4 == 0);
    const int64_t n = static_cast<int64_t>(want.size() / 4);
    REQUIRE(RowBytes(type, n) == raw.size());
    std::vector<float> got(static_cast<size_t>(n));
    DequantizeRow(type, raw.data(), got.data(), n);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, want.data() + 4 * i, 4);
      if (a != b) {
        if (mismatches < 5) MESSAGE(name << "[" << i << "]: got " << got[i] << " want bits " << b);
        ++mismatches;
      }
    }
    CHECK(mismatches == 0);
  }
}

}  // namespace
}  // namespace braid::kernels
