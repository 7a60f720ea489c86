#include "runner/logits_fixture.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "kernels/dtype.h"

namespace braid {

Result<std::vector<LogitsRecord>> ReadLogitsFixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t off = 0;
  bool bad = false;
  auto take = [&](void* dst, size_t n) {
    if (bad || n > data.size() - off) {
      bad = true;
      return;
    }
    std::memcpy(dst, data.data() + off, n);
    off += n;
  };
  auto u32 = [&]() {
    uint32_t v = 0;
    take(&v, 4);
    return v;
  };
  char magic[4] = {};
  take(magic, 4);
  if (std::memcmp(magic, "BRLG", 4) != 0) return Status::Corruption(path + ": not a BRLG file");
  if (u32() != 1) return Status::Unsupported(path + ": BRLG version is not 1");
  const uint32_t n_prompts = u32();
  std::vector<LogitsRecord> out;
  for (uint32_t p = 0; p < n_prompts && !bad; ++p) {
    LogitsRecord r;
    uint32_t n = u32();
    if (n > (1u << 20)) return Status::Corruption(path + ": prompt too long");
    r.ids.resize(n);
    take(r.ids.data(), 4 * size_t{n});
    r.k = static_cast<int>(u32());
    if (r.k > 1024) return Status::Corruption(path + ": k too large");
    r.top_ids.resize(size_t{n} * r.k);
    r.top_logits.resize(size_t{n} * r.k);
    for (uint32_t i = 0; i < n; ++i) {
      take(&r.top_ids[size_t{i} * r.k], 4 * size_t(r.k));
      take(&r.top_logits[size_t{i} * r.k], 4 * size_t(r.k));
    }
    uint32_t n_vocab = u32();
    if (n_vocab > (1u << 24)) return Status::Corruption(path + ": vocab too large");
    std::vector<uint16_t> half(n_vocab);
    take(half.data(), 2 * size_t{n_vocab});
    r.last_logits.resize(n_vocab);
    for (uint32_t i = 0; i < n_vocab; ++i) r.last_logits[i] = kernels::Fp16ToFp32(half[i]);
    uint32_t n_gen = u32();
    if (n_gen > (1u << 16)) return Status::Corruption(path + ": continuation too long");
    r.gen.resize(n_gen);
    take(r.gen.data(), 4 * size_t{n_gen});
    r.gen_gaps.resize(n_gen);
    take(r.gen_gaps.data(), 4 * size_t{n_gen});
    out.push_back(std::move(r));
  }
  if (bad) return Status::Corruption(path + ": truncated");
  return out;
}

}  // namespace braid
