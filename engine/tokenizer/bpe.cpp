// BPE merge loop. Short words (the common case after pre-tokenization) use a
// direct scan, O(n^2) lookups on a few symbols; longer ones a min-heap of
// candidate pairs over a doubly linked list of symbols, O(n log n), with stale
// heap entries skipped when popped (the scheme of HF tokenizers' Word::merge_all).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <queue>

namespace braid {

void MergeTable::Reserve(size_t n) {
  size_t cap = 16;
  int bits = 4;
  while (cap < n * 2 + 16) {
    cap *= 2;
    ++bits;
  }
  slots_.assign(cap, Slot{});
  shift_ = 64 - bits;
  size_ = 0;
}

bool MergeTable::Add(int32_t left, int32_t right, MergeRule rule) {
  if ((size_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    Reserve(std::max<size_t>(old.size(), 16));
    for (const Slot& s : old) {
      if (s.key != kEmpty)
        Add(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key), s.rule);
    }
  }
  const uint64_t key = Key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = Index(key);; i = (i + 1) & mask) {
    if (slots_[i].key == key) return false;
    if (slots_[i].key == kEmpty) {
      slots_[i].key = key;
      slots_[i].rule = rule;
      ++size_;
      return true;
    }
  }
}

const MergeRule* MergeTable::Find(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t key = Key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = Index(key);; i = (i + 1) & mask) {
    if (slots_[i].key == key) return &slots_[i].rule;
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

namespace {

constexpr size_t kDirectScanMax = 24;

void MergeDirect(const MergeTable& table, std::vector<int32_t>& s) {
  while (s.size() > 1) {
    int32_t best_rank = INT32_MAX, best_merged = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const MergeRule* r = table.Find(s[i], s[i + 1]);
      if (r != nullptr && r->rank < best_rank) {
        best_rank = r->rank;
        best_merged = r->merged;
        best = i;
      }
    }
    if (best_merged < 0) return;
    s[best] = best_merged;
    s.erase(s.begin() + static_cast<ptrdiff_t>(best) + 1);
  }
}

struct Candidate {
  int32_t rank;
  int32_t left;  // index of the left symbol
  int32_t left_id, right_id;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

void MergeHeap(const MergeTable& table, std::vector<int32_t>& s) {
  const auto n = static_cast<int32_t>(s.size());
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<char> alive(n, 1);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](int32_t l) {
    if (l < 0 || next[l] < 0) return;
    if (const MergeRule* r = table.Find(s[l], s[next[l]]))
      heap.push({r->rank, l, s[l], s[next[l]]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t r = next[c.left];
    if (!alive[c.left] || r < 0 || s[c.left] != c.left_id || s[r] != c.right_id) continue;
    s[c.left] = table.Find(c.left_id, c.right_id)->merged;
    alive[r] = 0;
    next[c.left] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) s[out++] = s[i];
  s.resize(out);
}

}  // namespace

void ApplyMerges(const MergeTable& table, std::vector<int32_t>& symbols) {
  if (symbols.size() <= kDirectScanMax) {
    MergeDirect(table, symbols);
  } else {
    MergeHeap(table, symbols);
  }
}

}  // namespace braid
