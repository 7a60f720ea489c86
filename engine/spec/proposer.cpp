#include "spec/proposer.h"

#include <algorithm>
#include <cmath>

namespace braid::spec {

void NgramProposer::Propose(std::span<const int32_t> context, int max_tokens,
                            std::vector<int32_t>* out) {
  out->clear();
  const int len = static_cast<int>(context.size());
  if (max_tokens <= 0) return;
  for (int n = std::min(max_n_, len - 1); n >= min_n_; --n) {
    const int32_t* tail = context.data() + len - n;
    // The most recent earlier occurrence with at least one token after it.
    for (int i = len - n - 1; i >= 0; --i) {
      if (!std::equal(tail, tail + n, context.data() + i)) continue;
      // Copied as far as asked; past the context's end the copy reads what
      // it has already proposed (a periodic tail goes on repeating).
      const int from = i + n;
      for (int j = 0; j < max_tokens; ++j)
        out->push_back(from + j < len ? context[from + j] : (*out)[from + j - len]);
      return;
    }
  }
}

int32_t SuffixIndex::Child(int32_t node, int32_t token) const {
  const auto& c = nodes_[node].children;
  auto it = c.find(token);
  return it == c.end() ? -1 : it->second;
}

void SuffixIndex::Extend(std::span<const int32_t> tokens, size_t from) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t depth = static_cast<size_t>(max_depth_);
  for (size_t p = from; p < tokens.size(); ++p) {
    // Every suffix ending at p: the path tokens[s..p-1] exists; add tokens[p].
    for (size_t s = p + 1 > depth ? p + 1 - depth : 0; s <= p; ++s) {
      int32_t node = 0;
      for (size_t i = s; i < p && node >= 0; ++i) node = Child(node, tokens[i]);
      if (node < 0) continue;  // cut off when the trie was full
      int32_t next = Child(node, tokens[p]);
      if (next < 0) {
        if (nodes_.size() >= max_nodes_) continue;
        next = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace(tokens[p], next);
        nodes_.emplace_back();
      }
      ++nodes_[next].count;
    }
  }
}

int32_t SuffixIndex::Match(std::span<const int32_t> tokens, int* depth) const {
  const int len = static_cast<int>(tokens.size());
  for (int m = std::min(max_depth_ - 1, len); m >= 1; --m) {
    int32_t node = 0;
    for (int i = len - m; i < len && node >= 0; ++i) node = Child(node, tokens[i]);
    if (node >= 0 && !nodes_[node].children.empty()) {
      *depth = m;
      return node;
    }
  }
  return -1;
}

void SuffixIndex::Propose(std::span<const int32_t> context, int max_tokens, float min_share,
                          std::vector<int32_t>* out) const {
  out->clear();
  if (max_tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  // Matching reads at most the last max_depth - 1 tokens: copy only those.
  const size_t tail = std::min(context.size(), static_cast<size_t>(max_depth_ - 1));
  std::vector<int32_t> seen(context.end() - tail, context.end());
  int depth = 0;
  int32_t node = Match(seen, &depth);
  while (node >= 0 && static_cast<int>(out->size()) < max_tokens) {
    // The most frequent continuation (the smaller token on equal counts).
    int32_t best = -1, best_node = -1;
    uint32_t best_count = 0;
    for (const auto& [token, child] : nodes_[node].children) {
      const uint32_t c = nodes_[child].count;
      if (c > best_count || (c == best_count && token < best)) {
        best = token, best_node = child, best_count = c;
      }
    }
    if (best_node < 0 ||
        static_cast<float>(best_count) < min_share * static_cast<float>(nodes_[node].count))
      break;
    out->push_back(best);
    seen.push_back(best);
    node = best_node, ++depth;
    // At the depth bound (or a leaf), match again on the latest tokens.
    if (depth >= max_depth_ || nodes_[node].children.empty()) node = Match(seen, &depth);
  }
}

void SuffixIndex::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  nodes_.assign(1, Node());
}

size_t SuffixIndex::nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_.size();
}

void SuffixProposer::Propose(std::span<const int32_t> context, int max_tokens,
                             std::vector<int32_t>* out) {
  if (context.size() < indexed_) {  // not the context it indexed: start over
    own_.Clear();
    indexed_ = 0;
  }
  own_.Extend(context, indexed_);
  indexed_ = context.size();
  own_.Propose(context, max_tokens, min_share_, out);
  if (shared_) {
    shared_->Propose(context, max_tokens, min_share_, &other_);
    if (other_.size() > out->size()) out->swap(other_);
  }
}

std::shared_ptr<SuffixIndex> SuffixStore::For(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& index = indexes_[key];
  if (!index) index = std::make_shared<SuffixIndex>();
  return index;
}

std::unique_ptr<Proposer> MakeProposer(const SpecOptions& spec,
                                       std::shared_ptr<SuffixIndex> shared) {
  switch (spec.kind) {
    case SpecOptions::Kind::kNgram:
      return std::make_unique<NgramProposer>();
    case SpecOptions::Kind::kSuffix:
      return std::make_unique<SuffixProposer>(std::move(shared));
    default:
      return nullptr;
  }
}

}  // namespace braid::spec
