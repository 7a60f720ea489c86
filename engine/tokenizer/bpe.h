// The BPE merge step shared by the byte-level and SentencePiece-style
// tokenizers: a table of ranked merges over token ids and the merge loop.
// Internal to the tokenizer library. Immutable after building; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid {

struct MergeRule {
  int32_t rank;    // lower merges first
  int32_t merged;  // the id of left+right
};

// (left id, right id) -> MergeRule, an open-addressing hash table.
class MergeTable {
 public:
  // Sizes the table for `n` rules; call before Add.
  void Reserve(size_t n);
  // Adds a rule; returns false (and keeps the first) if the pair is present.
  bool Add(int32_t left, int32_t right, MergeRule rule);
  // The rule for the pair, or nullptr.
  const MergeRule* Find(int32_t left, int32_t right) const;
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    MergeRule rule{};
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t Key(int32_t l, int32_t r) {
    return (uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r);
  }
  size_t Index(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  std::vector<Slot> slots_;
  int shift_ = 64;
  size_t size_ = 0;
};

// Merges adjacent symbols of `symbols` (token ids) in place: repeatedly the
// pair with the lowest rank, the leftmost among equal ranks, until no pair of
// neighbours has a rule.
void ApplyMerges(const MergeTable& table, std::vector<int32_t>& symbols);

}  // namespace braid
