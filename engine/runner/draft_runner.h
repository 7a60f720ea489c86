// Draft-model speculation: a smaller model with the target's tokenizer (its
// own file, or the target's first layers: OpenDraftModel) guesses the next
// tokens greedily, for every sequence of a step together: one batched
// forward pass brings each sequence's draft KV up to its context, then one
// batched pass per further guess.
//
// Each sequence's draft KV follows the target's: before a proposal it is cut
// back to the longest prefix the draft has in common with the context
// (rejected guesses leave it there), and only the tokens after that are
// evaluated. The draft's KV blocks come from a pool of its own.
//
// Greedy guesses are deterministic, so the target keeps a guess when it is
// the token the target draws at that position, as for every proposer. That
// is the rejection rule for a draft that puts all its probability on one
// token: kept with the target's probability of it, and otherwise a draw from
// the target's distribution without it (the residual distribution).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "engine/model.h"
#include "spec/proposer.h"

namespace braid {

class Backend;
class KvMemory;

class DraftRunner {
 public:
  // `draft` (a model from Model::Open) outlives the runner; its pool holds
  // kv_tokens positions in blocks of block_size. Errors: a draft that is not
  // a backend model, the backend's allocation.
  static Result<std::unique_ptr<DraftRunner>> Open(Model& draft, int kv_tokens, int block_size);
  ~DraftRunner();

  // One sequence's draft state; its blocks return to the pool when it is
  // destroyed (from any thread). Made by NewSeq.
  class Seq {
   public:
    ~Seq();

   private:
    friend class DraftRunner;
    explicit Seq(DraftRunner* runner) : runner_(runner) {}
    DraftRunner* runner_;
    std::vector<int32_t> fed_;     // the tokens in its draft KV, in order
    std::vector<int32_t> blocks_;  // its block table
  };
  std::unique_ptr<Seq> NewSeq() { return std::unique_ptr<Seq>(new Seq(this)); }

  struct Job {
    Seq* seq = nullptr;
    std::span<const int32_t> context;     // the prompt and the output so far
    int max_tokens = 0;                   // guesses wanted
    std::vector<int32_t>* out = nullptr;  // cleared, then the guesses
  };
  // Guesses for every job (not thread-safe: one caller at a time). A job
  // gets fewer or none when the draft's pool or context is full or its
  // logits are not finite; an error of the forward pass leaves all without.
  void Propose(std::span<Job> jobs);

  // How many tokens of `context` a proposal for `seq` would first evaluate
  // (those after the prefix its draft KV shares with the context, at least 1).
  static int Behind(const Seq& seq, std::span<const int32_t> context);
  // A probe evaluates at most this many before its guess; a sequence
  // further behind is not probed (it is drafted only when its guesses are
  // chosen outright).
  static constexpr int kProbeCatchUp = 64;

 private:
  DraftRunner(Backend& backend, std::unique_ptr<KvMemory> kv, int context);
  // The draft KV's tokens a proposal for `seq` keeps: the prefix it shares
  // with `context`, less the context's last token (evaluated again for its
  // logits).
  static size_t Kept(const Seq& seq, std::span<const int32_t> context);
  bool Reserve(Seq& s, int positions);
  void Release(Seq& s);
  // A job in progress in Propose.
  struct Work {
    Job* job;
    size_t next;  // the first context token not in the draft KV yet
    int want;     // guesses still possible
  };
  // Evaluates each job's context not in its draft KV yet, in passes of at
  // most max_chunk tokens; the pass that ends a context gives its first
  // guess. False when a forward pass failed.
  bool CatchUp(std::vector<Work>& work);
  // One pass per further guess: each job evaluates its last guess. False
  // when a forward pass failed.
  bool Extend(std::vector<Work>& work);

  Backend& backend_;
  std::unique_ptr<KvMemory> kv_;
  const int block_size_, context_;
  std::mutex mu_;  // free_
  std::vector<int32_t> free_;
};

// A proposer over a runner of its own, for one sequence (Generate).
class DraftProposer : public spec::Proposer {
 public:
  explicit DraftProposer(std::unique_ptr<DraftRunner> runner)
      : runner_(std::move(runner)), seq_(runner_->NewSeq()) {}
  void Propose(std::span<const int32_t> context, int max_tokens,
               std::vector<int32_t>* out) override;
  const char* name() const override { return "draft"; }
  int Behind(std::span<const int32_t> context) const { return DraftRunner::Behind(*seq_, context); }

 private:
  std::unique_ptr<DraftRunner> runner_;
  std::unique_ptr<DraftRunner::Seq> seq_;
};

}  // namespace braid
