#include "runner/step_batch.h"

#include <algorithm>

#include "runner/stop_matcher.h"

namespace braid {

StepBatch::StepBatch(int n_vocab, const std::vector<int32_t>& eog_ids)
    : n_vocab_(n_vocab), eog_ids_(eog_ids) {}

int StepBatch::LogitsFrom(const ScheduledItem& it) {
  if (it.guesses > 0) return it.start;
  const int last = it.start + it.n_tokens - 1;
  int from = it.sample ? last : BatchSegment::kNoLogits;
  if (it.seq->logprobs_from > 0) {
    const int want = std::max(it.start, it.seq->logprobs_from - 1);
    if (want < it.seq->prompt_len - 1 && want <= last) from = std::min(from, want);
  }
  // Rows must be contiguous up to the end of the segment.
  return from;
}

bool StepBatch::Plain(const ScheduledItem& it, int item_rows, ServingRequest& r) {
  return it.sample && item_rows == 1 + it.guesses && it.seq->max_tokens > 0 &&
         !r.request().logits_processor && r.request().top_logprobs < 0 &&
         it.seq->generated() + it.guesses >= r.request().sampling.min_tokens;
}

void StepBatch::Assemble(const StepPlan& plan, const RequestsBySeq& by_seq) {
  segments_.clear();
  first_row_.clear();
  rows_ = 0;
  bool argmax = true, top = true;
  top_k_ = 1;
  const int max_top = std::min(Backend::kMaxTopK, n_vocab_);
  for (const ScheduledItem& it : plan.items) {
    ServingRequest& r = *by_seq.at(it.seq);
    BatchSegment seg;
    seg.tokens = it.guesses > 0 ? r.pass().data() : it.seq->tokens.data() + it.start;
    seg.n_tokens = it.n_tokens;
    seg.pos0 = it.start;
    seg.block_table = it.seq->blocks.data();
    if (!it.seq->slides.empty()) seg.slide_table = it.seq->slides.data();
    seg.logits_from = LogitsFrom(it);
    first_row_.push_back(rows_);
    const int item_rows = std::max(0, it.start + it.n_tokens - seg.logits_from);
    rows_ += item_rows;
    segments_.push_back(seg);
    if (item_rows == 0) continue;
    const bool plain = Plain(it, item_rows, r);
    const int candidates = r.sampler().top_candidates();
    argmax &= plain && r.sampler().greedy();
    top &= plain && candidates >= 1 && candidates <= max_top;
    top_k_ = std::max(top_k_, candidates);
  }
  output_ = argmax ? Output::kArgmax : top ? Output::kTopK : Output::kLogits;
}

Status StepBatch::Forward(Backend& backend, KvMemory& kv) {
  const size_t rows = static_cast<size_t>(std::max(rows_, 1));
  switch (output_) {
    case Output::kArgmax:
      ids_.resize(rows);
      return backend.ForwardArgmax(segments_, kv, ids_.data());
    case Output::kTopK:
      ids_.resize(rows * top_k_);
      top_values_.resize(ids_.size());
      return backend.ForwardTopK(segments_, kv, top_k_, ids_.data(), top_values_.data());
    case Output::kLogits:
      break;
  }
  logits_.resize(rows * n_vocab_);
  return backend.Forward(segments_, kv, logits_.data());
}

std::span<const float> StepBatch::logits(int row) const {
  return std::span<const float>(&logits_[static_cast<size_t>(row) * n_vocab_], n_vocab_);
}

int32_t StepBatch::Draw(int row, ServingRequest& r, TokenLogprob* lp) {
  switch (output_) {
    case Output::kArgmax:
      return ids_[static_cast<size_t>(row)];  // -1: the row was not finite
    case Output::kTopK: {
      const size_t at = static_cast<size_t>(row) * top_k_;
      if (ids_[at] < 0) return -1;  // the row was not finite
      return r.sampler().SampleTop(std::span<const float>(&top_values_[at], top_k_),
                                   std::span<const int32_t>(&ids_[at], top_k_));
    }
    case Output::kLogits:
      break;
  }
  std::span<float> logits(&logits_[static_cast<size_t>(row) * n_vocab_], n_vocab_);
  if (!Sampler::AllFinite(logits)) return -1;
  return SampleRow(r, logits, lp);
}

// The logits processor, the min_tokens mask, penalties and the sampler;
// `lp` gets the log-probabilities when asked for.
int32_t StepBatch::SampleRow(ServingRequest& r, std::span<float> logits, TokenLogprob* lp) const {
  const SeqState& s = r.seq();
  const SamplingParams& sp = r.request().sampling;
  if (s.generated() < sp.min_tokens) MaskEnds(logits, eog_ids_, sp);
  if (r.request().logits_processor)
    r.request().logits_processor(
        std::span<const int32_t>(s.tokens.data() + s.prompt_len, s.tokens.size() - s.prompt_len),
        logits);
  const int k = r.request().top_logprobs;
  std::vector<float> raw;
  if (k >= 0) raw.assign(logits.begin(), logits.end());
  const int32_t id = r.sampler().Sample(logits, s.tokens);
  if (k >= 0) *lp = Logprobs(raw, id, k);
  return id;
}

}  // namespace braid
