// One step of the serving engine as a batch: the segments of a StepPlan
// (assemble), the backend's forward pass over them, and the draw of each
// logits row's token (sample). The buffers are kept from step to step.
//
// What a step's rows bring back: each row's argmax when every sampling row
// is a plain greedy draw, else each row's top_k largest logits when every
// sampler draws from at most that many, else whole rows of logits (then
// also the prompt log-probabilities). The backend picks argmax and top-k
// where the logits are.
//
// Step loop only.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "runner/serving_request.h"
#include "sched/scheduler.h"

namespace braid {

// The request of each sequence in a step.
using RequestsBySeq = std::unordered_map<const SeqState*, ServingRequest*>;

class StepBatch {
 public:
  enum class Output { kArgmax, kTopK, kLogits };

  // `eog_ids` (kept by the caller) are masked before a request's min_tokens.
  StepBatch(int n_vocab, const std::vector<int32_t>& eog_ids);

  // First position of an item whose logits are needed: the last token when
  // it samples (from the last token on when it checks guesses), earlier ones
  // for prompt log-probabilities (rows run to the end of the segment).
  static int LogitsFrom(const ScheduledItem& it);

  // Builds the segments of `plan`: an item that checks guesses runs its
  // request's pass() (the last token, then the guesses), others their
  // sequence's tokens; chooses what the rows bring back.
  void Assemble(const StepPlan& plan, const RequestsBySeq& by_seq);
  // Runs the assembled batch through `backend` on `kv`. Errors: the
  // backend's (the step's requests then fail).
  Status Forward(Backend& backend, KvMemory& kv);

  Output output() const { return output_; }
  // The first logits row of plan item `item`.
  int first_row(size_t item) const { return first_row_[item]; }
  // Logits row `row` (Output::kLogits only).
  std::span<const float> logits(int row) const;

  // Draws r's next token from row `row`: the backend's argmax, a draw from
  // the row's top k, or from the whole row after r's logits processor,
  // min_tokens mask and penalties, with `lp` getting the log-probabilities
  // when r asks for them. -1 when the row's logits were not finite.
  int32_t Draw(int row, ServingRequest& r, TokenLogprob* lp);

 private:
  // Whether item `it` of `r` can take its rows as argmax or top-k: it
  // samples every row it has, with no logits processor, logprobs or
  // min_tokens mask.
  static bool Plain(const ScheduledItem& it, int item_rows, ServingRequest& r);
  int32_t SampleRow(ServingRequest& r, std::span<float> logits, TokenLogprob* lp) const;

  const int n_vocab_;
  const std::vector<int32_t>& eog_ids_;
  std::vector<BatchSegment> segments_;
  std::vector<int> first_row_;  // per item
  int rows_ = 0;
  Output output_ = Output::kLogits;
  int top_k_ = 1;
  std::vector<float> logits_;      // [rows, n_vocab] (kLogits)
  std::vector<int32_t> ids_;       // [rows] (kArgmax) or [rows, top_k] (kTopK)
  std::vector<float> top_values_;  // [rows, top_k] (kTopK)
};

}  // namespace braid
