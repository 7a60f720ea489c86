#include "tokenizer/special_tokens.h"

namespace braid {

void SpecialTokenMatcher::Add(std::string text, int32_t id) {
  if (text.empty()) return;
  if (by_first_.empty()) by_first_.resize(256);
  auto& bucket = by_first_[static_cast<unsigned char>(text[0])];
  // Keep each bucket sorted by length, longest first; the first id wins for a
  // duplicated text.
  size_t pos = 0;
  while (pos < bucket.size() && tokens_[bucket[pos]].text.size() >= text.size()) {
    if (tokens_[bucket[pos]].text == text) return;
    ++pos;
  }
  tokens_.push_back({std::move(text), id});
  bucket.insert(bucket.begin() + static_cast<ptrdiff_t>(pos),
                static_cast<uint32_t>(tokens_.size() - 1));
}

void SpecialTokenMatcher::Split(std::string_view text, std::vector<Segment>& out) const {
  const auto n = static_cast<uint32_t>(text.size());
  uint32_t plain_start = 0;
  uint32_t i = 0;
  while (i < n) {
    const std::vector<uint32_t>* cands =
        by_first_.empty() ? nullptr : &by_first_[static_cast<unsigned char>(text[i])];
    int32_t found = -1;
    uint32_t len = 0;
    if (cands != nullptr) {
      for (uint32_t idx : *cands) {
        const Entry& e = tokens_[idx];
        if (text.substr(i, e.text.size()) == e.text) {
          found = e.id;
          len = static_cast<uint32_t>(e.text.size());
          break;
        }
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    if (i > plain_start) out.push_back({plain_start, i, -1});
    out.push_back({i, i + len, found});
    i += len;
    plain_start = i;
  }
  if (n > plain_start) out.push_back({plain_start, n, -1});
}

}  // namespace braid
