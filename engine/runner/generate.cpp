// Generate: prompt evaluation, then sample -> stream -> evaluate on a fresh
// sequence, one token a pass, or with speculation the tokens a pass confirms.
#include <algorithm>
#include <chrono>
#include <memory>

#include "engine/model.h"
#include "runner/draft_runner.h"
#include "runner/spec_verify.h"
#include "runner/stop_matcher.h"
#include "sampling/sampler.h"
#include "spec/goodput.h"
#include "spec/proposer.h"

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Generate's speculation: the proposer (a draft model's, or model-free), the
// acceptance measured so far and the cost of a pass by its size, from which
// the guesses of each next pass are chosen.
class Guesser {
 public:
  explicit Guesser(const SpecOptions& spec) : spec_(spec), cost_(spec.max_tokens + 1) {}

  Status Open(Model* draft, int capacity) {
    costly_ = spec_.kind == SpecOptions::Kind::kDraft;
    if (!costly_) {
      proposer_ = spec::MakeProposer(spec_);
      return Status::Ok();
    }
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<DraftRunner> runner,
                           DraftRunner::Open(*draft, capacity, 16));
    auto owned = std::make_unique<DraftProposer>(std::move(runner));
    draft_ = owned.get();
    proposer_ = std::move(owned);
    acceptance_ = spec::Acceptance(spec::kCostlyPrior);
    return Status::Ok();
  }

  // A pass checked `proposed` guesses and kept `accepted`.
  void Observe(int proposed, int accepted) {
    if (proposed == 0) return;
    acceptance_.Observe(proposed, accepted);
    if (costly_) probes_.Observe(accepted);
  }
  // A pass of n tokens took `seconds`.
  void ObserveCost(int n, double seconds) { cost_.Observe(n, seconds); }

  // The guesses to check after `history` with room for `room` of them.
  void Next(const std::vector<int32_t>& history, int room, std::vector<int32_t>* drafts) {
    drafts->clear();
    if (!proposer_) return;
    int offered = std::min(spec_.max_tokens, room);
    // A draft model's guesses cost passes: how many to check is chosen
    // first and only those are made. Model-free guesses are made first.
    if (costly_) {
      if (spec_.adaptive) offered = spec::UsefulGuesses(acceptance_.rate(), offered);
    } else if (offered > 0) {
      proposer_->Propose(history, offered, drafts);
      offered = static_cast<int>(drafts->size());
    }
    const spec::Candidate c{acceptance_.rate(), std::max(offered, 0)};
    int k = spec_.adaptive
                ? spec::ChooseGuesses(cost_, 1, 1, std::span<const spec::Candidate>(&c, 1))[0]
                : c.available;
    if (k > 0)
      acceptance_.Used();
    else if (c.available > 0 && spec::GuessCouldPay(cost_, 1, 1) &&
             (costly_ ? draft_->Behind(history) <= DraftRunner::kProbeCatchUp && probes_.Due()
                      : acceptance_.Probe()))
      k = 1;
    if (costly_ && k > 0) proposer_->Propose(history, k, drafts);
    drafts->resize(std::min(k, static_cast<int>(drafts->size())));
  }

 private:
  const SpecOptions& spec_;
  bool costly_ = false;
  std::unique_ptr<spec::Proposer> proposer_;
  DraftProposer* draft_ = nullptr;  // proposer_, when it is a draft model's
  spec::Acceptance acceptance_;
  spec::ProbeSchedule probes_;  // a draft model's
  spec::StepCost cost_;
};

// A Generate call's output: the token each logits row draws (the sampler
// over the history, end tokens masked before min_tokens) and each drawn
// token's way into the result (stop tokens and strings, max_tokens, the
// text streamed to on_text).
class Output {
 public:
  Output(const Model& model, const SamplingParams& params, std::span<const int32_t> prompt,
         const std::function<bool(std::string_view)>& on_text, GenerateResult* r)
      : model_(model),
        params_(params),
        on_text_(on_text),
        r_(*r),
        history_(prompt.begin(), prompt.end()),
        sampler_(params),
        decoder_(model),
        stops_(params),
        eog_ids_(params.min_tokens > 0 ? EndOfGenerationIds(model) : std::vector<int32_t>()) {}

  const std::vector<int32_t>& history() const { return history_; }

  // The token a row of logits draws; -1 when they are not finite.
  int32_t Draw(std::span<float> row) {
    if (!Sampler::AllFinite(row)) return -1;
    if (static_cast<int>(r_.tokens.size()) < params_.min_tokens) MaskEnds(row, eog_ids_, params_);
    return sampler_.Sample(row, history_);
  }

  // A drawn token joins the output; true when the output ends with it.
  bool Take(int32_t id) {
    if (stops_.EndsBefore(id, !params_.ignore_eos && model_.IsEndOfGeneration(id))) {
      r_.finish_reason = "stop";
      return true;
    }
    r_.tokens.push_back(id);
    history_.push_back(id);
    const std::string piece = decoder_.Push(id);
    std::string text;
    const OutputStops::End end = stops_.Joined(static_cast<int>(r_.tokens.size()), &piece, &text);
    Emit(text);
    if (end == OutputStops::End::kStopString || !keep_going_) {
      r_.finish_reason = "stop";
      return true;
    }
    return end == OutputStops::End::kLength;
  }

  // Releases what the UTF-8 decoder and the stop matcher still hold, unless
  // a stop string ended the text.
  void Flush() {
    if (stops_.stopped_by_string()) return;
    std::string held;
    Emit(stops_.Flush(decoder_.Flush(), &held));
    Emit(held);
  }

 private:
  void Emit(const std::string& text) {
    if (text.empty()) return;
    r_.text += text;
    if (on_text_ && keep_going_) keep_going_ = on_text_(text);
  }

  const Model& model_;
  const SamplingParams& params_;
  const std::function<bool(std::string_view)>& on_text_;
  GenerateResult& r_;
  std::vector<int32_t> history_;  // the prompt, then the output
  Sampler sampler_;
  TextStream decoder_;
  OutputStops stops_;
  const std::vector<int32_t> eog_ids_;
  bool keep_going_ = true;  // on_text has not asked to stop
};

}  // namespace

Result<GenerateResult> Generate(Model& model, std::span<const int32_t> prompt,
                                const SamplingParams& params,
                                const std::function<bool(std::string_view)>& on_text,
                                const SpecOptions& spec, Model* draft) {
  BRAID_RETURN_IF_ERROR(params.Validate());
  if (prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  if (spec.kind == SpecOptions::Kind::kDraft && draft == nullptr)
    return Status::InvalidArgument("draft speculation needs the draft model (OpenDraftModel)");
  std::unique_ptr<Sequence> seq = model.NewSequence();
  if (static_cast<int64_t>(prompt.size()) >= seq->capacity())
    return Status::OutOfRange("the prompt has " + std::to_string(prompt.size()) +
                              " tokens but the context holds " + std::to_string(seq->capacity()));

  GenerateResult r;
  r.prompt_tokens = static_cast<int>(prompt.size());
  // One logits row per guess checked by the last pass, plus one: row j
  // decides the token after the first j guesses.
  std::vector<float> logits;
  auto t0 = Clock::now();
  BRAID_RETURN_IF_ERROR(seq->Eval(prompt, &logits));
  auto t1 = Clock::now();
  r.prefill_seconds = Seconds(t0, t1);
  const size_t n_vocab = logits.size();

  Output out(model, params, prompt, on_text, &r);
  Guesser guesser(spec);
  BRAID_RETURN_IF_ERROR(guesser.Open(draft, seq->capacity()));
  auto draw = [&](int j) {
    return out.Draw(std::span<float>(logits.data() + static_cast<size_t>(j) * n_vocab, n_vocab));
  };
  auto take = [&](int32_t id) { return out.Take(id); };
  r.finish_reason = "length";
  std::vector<int32_t> drafts, batch;
  while (params.max_tokens != 0) {
    // Tokens row by row while the guesses hold (spec_verify.h).
    const int first_row_pos = seq->position() - static_cast<int>(drafts.size()) - 1;
    const Verdict v = VerifyGuesses(drafts, draw, take);
    if (v.bad_row >= 0) return Sampler::NonFiniteError(first_row_pos + v.bad_row);
    r.spec_proposed += static_cast<int>(drafts.size());
    r.spec_accepted += v.accepted;
    guesser.Observe(static_cast<int>(drafts.size()), v.accepted);
    if (v.ended) break;
    // The rejected guesses leave the KV cache.
    seq->Truncate(seq->position() - (static_cast<int>(drafts.size()) - v.accepted));
    if (seq->position() + 1 > seq->capacity()) break;
    // The next pass: the new token, then the guesses after it.
    guesser.Next(out.history(),
                 std::min(seq->capacity() - seq->position() - 1,
                          params.max_tokens - static_cast<int>(r.tokens.size()) - 1),
                 &drafts);
    batch.assign(1, v.last);
    batch.insert(batch.end(), drafts.begin(), drafts.end());
    const auto s0 = Clock::now();
    BRAID_RETURN_IF_ERROR(seq->Eval(batch, &logits, !drafts.empty()));
    guesser.ObserveCost(static_cast<int>(batch.size()), Seconds(s0, Clock::now()));
    ++r.decode_steps;
  }
  out.Flush();
  r.decode_seconds = Seconds(t1, Clock::now());
  return r;
}

}  // namespace braid
