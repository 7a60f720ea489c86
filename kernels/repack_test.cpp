// RepackQ5_0AsQ8_0: the Q8_0 blocks it writes hold q - 16 under the same d and
// dequantize to exactly the Q5_0 values (every fp16 d, every 5-bit q).
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/quant.h"
#include "ref/blocks.h"

namespace braid::kernels {
namespace {

// A Q5_0 block from 32 values q in 0..31, packed from the layout's definition
// (ggml-common.h), independently of the code under test.
BlockQ5_0 Pack(uint16_t d, const int* q) {
  BlockQ5_0 b{};
  b.d = d;
  uint32_t qh = 0;
  for (int j = 0; j < kQK; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) b.qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  for (int j = 0; j < kQK / 2; ++j)
    b.qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + kQK / 2] & 0xF) << 4));
  return b;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("Q5_0 dequantizes d * (q - 16) with ggml's bit layout") {
  int up[kQK], down[kQK];
  for (int j = 0; j < kQK; ++j) {
    up[j] = j;
    down[j] = 31 - j;
  }
  const uint16_t d = Fp32ToFp16(-0.375f);
  const BlockQ5_0 blocks[2] = {Pack(d, up), Pack(d, down)};
  std::vector<float> y(2 * kQK);
  DequantizeRow(DType::kQ5_0, blocks, y.data(), 2 * kQK);
  for (int j = 0; j < kQK; ++j) {
    INFO("element " << j);
    CHECK(y[j] == static_cast<float>(j - 16) * -0.375f);
    CHECK(y[kQK + j] == static_cast<float>(15 - j) * -0.375f);
  }
}

TEST_CASE("RepackQ5_0AsQ8_0 is exact: same d, int8 q - 16, same floats bit for bit") {
  std::mt19937 rng(20240607);
  std::uniform_int_distribution<int> q5(0, 31);
  std::vector<BlockQ5_0> src;
  std::vector<std::vector<int>> qs;  // the q of each block, for the direct check
  auto add = [&](uint16_t d, std::vector<int> q) {
    src.push_back(Pack(d, q.data()));
    qs.push_back(std::move(q));
  };
  // Every fp16 bit pattern as d (+-0, subnormals, negatives, inf, NaN), random q.
  for (uint32_t h = 0; h < 65536; ++h) {
    std::vector<int> q(kQK);
    for (int& v : q) v = q5(rng);
    add(static_cast<uint16_t>(h), std::move(q));
  }
  // Every q value in every position, under d = 0, -0, a negative and a positive d.
  for (uint16_t d : {uint16_t{0x0000}, uint16_t{0x8000}, Fp32ToFp16(-1.5f), Fp32ToFp16(0.01f)}) {
    for (int shift = 0; shift < kQK; ++shift) {
      std::vector<int> q(kQK);
      for (int j = 0; j < kQK; ++j) q[j] = (j + shift) % 32;
      add(d, std::move(q));
    }
  }
  const int64_t n = static_cast<int64_t>(src.size()) * kQK;
  std::vector<BlockQ8_0> dst(src.size());
  RepackQ5_0AsQ8_0(src.data(), dst.data(), n);

  int64_t bad_blocks = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    bool ok = dst[i].d == src[i].d;
    for (int j = 0; j < kQK; ++j) ok = ok && dst[i].qs[j] == qs[i][j] - 16;
    if (!ok && bad_blocks++ < 5) MESSAGE("block " << i << " repacked wrongly");
  }
  CHECK(bad_blocks == 0);

  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  DequantizeRow(DType::kQ5_0, src.data(), want.data(), n);
  DequantizeRow(DType::kQ8_0, dst.data(), got.data(), n);
  CHECK(SameBits(want, got));
}

}  // namespace
}  // namespace braid::kernels
