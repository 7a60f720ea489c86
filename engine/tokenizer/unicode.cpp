// UTF-8 decoding and character-class lookup over the generated range table.
#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace braid::unicode {
namespace {

uint8_t SearchFlags(uint32_t cp) {
  const CodepointRange* begin = kCodepointRanges;
  const CodepointRange* end = kCodepointRanges + kNumCodepointRanges;
  const CodepointRange* it = std::upper_bound(
      begin, end, cp, [](uint32_t v, const CodepointRange& r) { return v < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->flags : 0;
}

// The Basic Multilingual Plane resolved once (64 KiB); a function-local static
// so initialisation is thread-safe.
const std::array<uint8_t, 0x10000>& BmpTable() {
  static const std::array<uint8_t, 0x10000> table = [] {
    std::array<uint8_t, 0x10000> t{};
    for (int i = 0; i < kNumCodepointRanges; ++i) {
      const CodepointRange& r = kCodepointRanges[i];
      for (uint32_t c = r.first; c <= r.last && c < 0x10000; ++c) t[c] = r.flags;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint8_t Flags(uint32_t cp) {
  if (cp < 0x10000) return BmpTable()[cp];
  if (cp > 0x10FFFF) return 0;
  return SearchFlags(cp);
}

int ValidSequenceLength(std::string_view s) {
  if (s.empty()) return -1;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return -1;
    const unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
    if (p[i] < lo_i || p[i] > hi_i) return 0;
  }
  return len;
}

void Decode(std::string_view text, std::vector<Char>& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  out.reserve(out.size() + n);
  size_t i = 0;
  while (i < n) {
    const unsigned char b0 = p[i];
    if (b0 < 0x80) {
      out.push_back({b0, static_cast<uint32_t>(i), Flags(b0)});
      ++i;
      continue;
    }
    const int len = ValidSequenceLength(text.substr(i));
    if (len <= 0) {
      out.push_back({0x110000u + b0, static_cast<uint32_t>(i), 0});
      ++i;
      continue;
    }
    uint32_t cp = b0 & (0xFF >> (len + 1));
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
    out.push_back({cp, static_cast<uint32_t>(i), Flags(cp)});
    i += len;
  }
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace braid::unicode
