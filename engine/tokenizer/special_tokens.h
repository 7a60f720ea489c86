// Finds the text of special (control and user-defined) tokens in input text:
// leftmost match first, the longest token among those starting there (the rule
// of HF tokenizers' added-vocabulary matcher). Internal; immutable after
// building, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

class SpecialTokenMatcher {
 public:
  // Registers a token; empty texts are ignored.
  void Add(std::string text, int32_t id);
  bool empty() const { return tokens_.empty(); }

  struct Segment {
    uint32_t begin, end;  // bytes of the text
    int32_t id;           // the special token's id, or -1 for plain text
  };
  // Splits `text` into plain-text and special-token segments (plain segments
  // are never empty).
  void Split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Entry {
    std::string text;
    int32_t id;
  };
  std::vector<Entry> tokens_;                    // sorted by first byte, then length descending
  std::vector<std::vector<uint32_t>> by_first_;  // first byte -> indices into tokens_
};

}  // namespace braid
