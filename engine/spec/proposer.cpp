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

namespace {
uint64_t EdgeKey(int32_t node, int32_t token) {
  return static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32 | static_cast<uint32_t>(token);
}
}  // namespace

int32_t SuffixIndex::Child(int32_t node, int32_t token) const {
  auto it = edges_.find(EdgeKey(node, token));
  return it == edges_.end() ? -1 : it->second;
}

void SuffixIndex::Rank(int32_t parent, int32_t child, int32_t token) {
  Node& p = nodes_[parent];
  if (p.best == child) return;
  const uint32_t c = nodes_[child].count;
  const uint32_t b = p.best < 0 ? 0 : nodes_[p.best].count;
  if (p.best < 0 || c > b || (c == b && token < p.best_token)) {
    p.best = child;
    p.best_token = token;
  }
}

void SuffixIndex::Extend(std::span<const int32_t> tokens, size_t from) {
  // The cursor of the suffixes ending just before `from`, then one Append
  // per token.
  std::vector<int32_t> cursor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t len = 1; len < static_cast<size_t>(max_depth_) && len <= from; ++len) {
      int32_t node = 0;
      for (size_t i = from - len; i < from && node >= 0; ++i) node = Child(node, tokens[i]);
      cursor.push_back(node);
    }
  }
  for (size_t p = from; p < tokens.size(); ++p) Append(&cursor, tokens[p]);
}

void SuffixIndex::Append(std::vector<int32_t>* cursor, int32_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  // The suffix of i + 1 tokens ending here extends the one of i tokens
  // ending before (the root for i = 0).
  const size_t n = std::min(cursor->size() + 1, static_cast<size_t>(max_depth_));
  std::vector<int32_t>& c = *cursor;
  c.resize(n);
  for (size_t i = n; i-- > 0;) {
    const int32_t parent = i == 0 ? 0 : c[i - 1];
    int32_t next = parent < 0 ? -1 : Child(parent, token);
    if (parent >= 0 && next < 0 && nodes_.size() < max_nodes_) {
      next = static_cast<int32_t>(nodes_.size());
      edges_.emplace(EdgeKey(parent, token), next);
      nodes_.emplace_back();
    }
    if (next >= 0) {
      ++nodes_[next].count;
      Rank(parent, next, token);
    }
    c[i] = next;
  }
}

int32_t SuffixIndex::Match(std::span<const int32_t> tokens, int* depth) const {
  const int len = static_cast<int>(tokens.size());
  for (int m = std::min(max_depth_ - 1, len); m >= 1; --m) {
    int32_t node = 0;
    for (int i = len - m; i < len && node >= 0; ++i) node = Child(node, tokens[i]);
    if (node >= 0 && nodes_[node].best >= 0) {
      *depth = m;
      return node;
    }
  }
  return -1;
}

void SuffixIndex::Propose(std::span<const int32_t> context, int max_tokens, float min_share,
                          std::vector<int32_t>* out, const std::vector<int32_t>* cursor) const {
  out->clear();
  if (max_tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  // Matching reads at most the last max_depth - 1 tokens: copy only those.
  const size_t tail = std::min(context.size(), static_cast<size_t>(max_depth_ - 1));
  std::vector<int32_t> seen(context.end() - tail, context.end());
  int depth = 0;
  int32_t node = -1;
  if (cursor) {
    // The longest suffix (of at most max_depth - 1 tokens) with a child.
    for (size_t i = std::min(cursor->size(), static_cast<size_t>(max_depth_ - 1)); i-- > 0;) {
      const int32_t c = (*cursor)[i];
      if (c >= 0 && nodes_[c].best >= 0) {
        node = c;
        depth = static_cast<int>(i) + 1;
        break;
      }
    }
  } else {
    node = Match(seen, &depth);
  }
  while (node >= 0 && static_cast<int>(out->size()) < max_tokens) {
    // The most frequent continuation (the smaller token on equal counts).
    const int32_t best_node = nodes_[node].best;
    const int32_t best = nodes_[node].best_token;
    const uint32_t best_count = best_node < 0 ? 0 : nodes_[best_node].count;
    if (best_node < 0 ||
        static_cast<float>(best_count) < min_share * static_cast<float>(nodes_[node].count))
      break;
    out->push_back(best);
    seen.push_back(best);
    node = best_node, ++depth;
    // At the depth bound (or a leaf), match again on the latest tokens.
    if (depth >= max_depth_ || nodes_[node].best < 0) node = Match(seen, &depth);
  }
}

void SuffixIndex::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  nodes_.assign(1, Node());
  edges_.clear();
}

uint32_t SuffixIndex::Count(std::span<const int32_t> path) const {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t node = 0;
  for (int32_t t : path) {
    node = Child(node, t);
    if (node < 0) return 0;
  }
  return nodes_[node].count;
}

size_t SuffixIndex::nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_.size();
}

void SuffixProposer::Propose(std::span<const int32_t> context, int max_tokens,
                             std::vector<int32_t>* out) {
  if (context.size() < indexed_) {  // not the context it indexed: start over
    own_.Clear();
    cursor_.clear();
    indexed_ = 0;
  }
  for (; indexed_ < context.size(); ++indexed_) own_.Append(&cursor_, context[indexed_]);
  own_.Propose(context, max_tokens, min_share_, out, &cursor_);
  if (shared_) {
    shared_->Propose(context, max_tokens, min_share_, &other_);
    if (other_.size() > out->size()) out->swap(other_);
  }
}

std::shared_ptr<SuffixIndex> SuffixStore::For(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Group& g = groups_[key];
  if (!g.index) g.index = std::make_shared<SuffixIndex>(32, max_nodes_);
  g.used = ++clock_;
  std::shared_ptr<SuffixIndex> index = g.index;
  if (groups_.size() > max_groups_) {  // the least recently used goes
    auto oldest = groups_.begin();
    for (auto it = groups_.begin(); it != groups_.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    groups_.erase(oldest);
  }
  return index;
}

size_t SuffixStore::groups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return groups_.size();
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
