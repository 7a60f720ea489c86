// Speculative decoding: proposers guess the next tokens of a sequence
// cheaply, the target model checks all the guesses in one forward pass, and
// the longest prefix of guesses the target's own draws agree with is kept
// (Generate, ServingEngine::Step). Proposers here are model-free (the draft
// model's are engine/runner/draft_runner.h); each works on token ids only and is
// owned by one request (not thread-safe), except SuffixIndex, which requests
// of the same semantic function share.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/spec.h"
#include "engine/status.h"

namespace braid::spec {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Up to max_tokens guesses of what follows `context` (the prompt and the
  // output so far) into `out` (cleared first). Fewer, or none, when the
  // proposer has no good guess.
  virtual void Propose(std::span<const int32_t> context, int max_tokens,
                       std::vector<int32_t>* out) = 0;
  virtual const char* name() const = 0;
};

// Prompt lookup: the longest n-gram (max_n down to min_n) ending the context
// that also occurs earlier in it; the tokens that followed its most recent
// earlier occurrence are the guess, copied on past the context's end as an
// overlapping copy (a tail that repeats with period p goes on repeating).
class NgramProposer : public Proposer {
 public:
  explicit NgramProposer(int max_n = 4, int min_n = 2) : max_n_(max_n), min_n_(min_n) {}
  void Propose(std::span<const int32_t> context, int max_tokens,
               std::vector<int32_t>* out) override;
  const char* name() const override { return "ngram"; }

 private:
  int max_n_, min_n_;
};

// Token sequences (earlier outputs of sibling calls, and a request's own
// context) in a depth-bounded suffix trie with a count per node: how many
// times the path from the root was followed by each child. A guess follows
// the longest suffix of the context found in the trie, then the most
// frequent child at each step, while that child's share stays above
// min_share (SuffixDecoding's frequency-guided speculation). Thread-safe.
class SuffixIndex {
 public:
  explicit SuffixIndex(int max_depth = 32, size_t max_nodes = 1 << 20)
      : max_depth_(max_depth), max_nodes_(max_nodes) {
    nodes_.emplace_back();
  }
  // Adds every suffix of `tokens` (each cut at max_depth). Once the trie
  // holds max_nodes nodes it stops growing; counts of existing paths still
  // rise.
  void Add(std::span<const int32_t> tokens) { Extend(tokens, 0); }
  // Adds the suffixes that end at positions [from, size) of `tokens`, whose
  // earlier positions were added before (Add is Extend from 0).
  void Extend(std::span<const int32_t> tokens, size_t from);
  // A sequence growing one token at a time: `cursor` holds the nodes of
  // its suffixes ending at its last token (cursor[i]: the one of i + 1
  // tokens; -1 where the full trie has none). Append adds the suffixes
  // ending at one more token, at a cost linear in max_depth.
  void Append(std::vector<int32_t>* cursor, int32_t token);
  // Up to max_tokens guesses after `context`, matched on at most
  // max_depth - 1 of its last tokens (or, given, from the cursor that
  // Append keeps for it).
  void Propose(std::span<const int32_t> context, int max_tokens, float min_share,
               std::vector<int32_t>* out, const std::vector<int32_t>* cursor = nullptr) const;
  size_t nodes() const;
  // How many times `path` was seen (0 if it is not in the trie).
  uint32_t Count(std::span<const int32_t> path) const;
  // Back to the empty trie.
  void Clear();

 private:
  struct Node {
    uint32_t count = 0;  // times this path was seen
    int32_t best = -1;   // the child seen most often (the smaller token on ties), -1: none
    int32_t best_token = 0;
  };
  // Keeps `best` up to date after child (of `token`) under `parent` was counted.
  void Rank(int32_t parent, int32_t child, int32_t token);
  int32_t Child(int32_t node, int32_t token) const;
  // The node of the longest suffix of `tokens` (at most max_depth - 1 long)
  // that has a child, or -1.
  int32_t Match(std::span<const int32_t> tokens, int* depth) const;

  int max_depth_;
  size_t max_nodes_;
  std::vector<Node> nodes_;  // nodes_[0] is the root
  // Edges: (parent << 32 | token) -> child, one table for the whole trie
  // (no container per node: a node is a few words).
  std::unordered_map<uint64_t, int32_t> edges_;
  mutable std::mutex mu_;
};

// The suffix proposer of one request: a shared index of its siblings'
// outputs (may be null) and a private one over its own context, which it
// extends as the context grows. The longer guess of the two wins.
class SuffixProposer : public Proposer {
 public:
  explicit SuffixProposer(std::shared_ptr<SuffixIndex> shared, float min_share = 0.1f)
      : shared_(std::move(shared)), min_share_(min_share) {}
  void Propose(std::span<const int32_t> context, int max_tokens,
               std::vector<int32_t>* out) override;
  const char* name() const override { return "suffix"; }

 private:
  std::shared_ptr<SuffixIndex> shared_;
  SuffixIndex own_;
  size_t indexed_ = 0;           // context tokens already in own_
  std::vector<int32_t> cursor_;  // own_'s nodes of the context's suffixes
  float min_share_;
  std::vector<int32_t> other_;
};

// Per semantic function (a name the runtime chooses), the SuffixIndex its
// calls share: finished outputs go in, new calls read it. Holds the
// max_groups most recently used groups, each of at most max_nodes nodes
// (a node is ~60 bytes with its edge); requests keep the index they
// hold alive.
// Thread-safe.
class SuffixStore {
 public:
  explicit SuffixStore(size_t max_groups = 64, size_t max_nodes = 1 << 16)
      : max_groups_(max_groups), max_nodes_(max_nodes) {}
  std::shared_ptr<SuffixIndex> For(const std::string& key);
  size_t groups() const;

 private:
  struct Group {
    std::shared_ptr<SuffixIndex> index;
    uint64_t used = 0;
  };
  size_t max_groups_, max_nodes_;
  mutable std::mutex mu_;
  uint64_t clock_ = 0;
  std::unordered_map<std::string, Group> groups_;
};

// The model-free proposer `spec` names (null when off or kDraft, whose
// guesses come from engine/runner/draft_runner.h); `shared` is the suffix
// proposer's index of sibling outputs (may be null).
std::unique_ptr<Proposer> MakeProposer(const SpecOptions& spec,
                                       std::shared_ptr<SuffixIndex> shared = nullptr);

}  // namespace braid::spec
