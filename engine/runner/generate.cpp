// Generate: prompt evaluation, then sample -> stream -> evaluate on a fresh
// sequence, one token a pass, or with speculation the tokens a pass confirms.
#include <algorithm>
#include <chrono>
#include <memory>

#include "engine/model.h"
#include "runner/draft_runner.h"
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
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  // One logits row per guess checked by the last pass, plus one: row j
  // decides the token after the first j guesses.
  std::vector<float> logits;
  auto t0 = Clock::now();
  BRAID_RETURN_IF_ERROR(seq->Eval(prompt, &logits));
  auto t1 = Clock::now();
  r.prefill_seconds = Seconds(t0, t1);
  const size_t n_vocab = logits.size();

  Sampler sampler(params);
  TextStream decoder(model);
  StopMatcher stops(params.stop);
  const std::vector<int32_t> eog_ids =
      params.min_tokens > 0 ? EndOfGenerationIds(model) : std::vector<int32_t>();
  std::unique_ptr<spec::Proposer> proposer;
  DraftProposer* draft_proposer = nullptr;  // proposer, when it is a draft model's
  const bool costly = spec.kind == SpecOptions::Kind::kDraft;
  if (costly) {
    BRAID_ASSIGN_OR_RETURN(std::unique_ptr<DraftRunner> runner,
                           DraftRunner::Open(*draft, seq->capacity(), 16));
    auto owned = std::make_unique<DraftProposer>(std::move(runner));
    draft_proposer = owned.get();
    proposer = std::move(owned);
  } else {
    proposer = spec::MakeProposer(spec);
  }
  spec::Acceptance acceptance = costly ? spec::Acceptance(spec::kCostlyPrior) : spec::Acceptance();
  spec::ProbeSchedule probes;  // a draft model's
  spec::StepCost cost(spec.max_tokens + 1);
  bool keep_going = true;
  bool stop_string_hit = false;
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    r.text += text;
    if (on_text && keep_going) keep_going = on_text(text);
  };

  r.finish_reason = "length";
  std::vector<int32_t> drafts, batch;
  bool done = params.max_tokens == 0;
  while (!done) {
    // Decide tokens row by row while the guesses hold; the first token not
    // guessed (a correction, or the one after every guess) ends the pass.
    const int first_row_pos = seq->position() - static_cast<int>(drafts.size()) - 1;
    int accepted = 0;
    int32_t next = -1;
    for (size_t j = 0; j <= drafts.size(); ++j) {
      std::span<float> row(logits.data() + j * n_vocab, n_vocab);
      if (!Sampler::AllFinite(row)) return Sampler::NonFiniteError(first_row_pos + j);
      // A guess is kept when it is the token drawn here. The draw is the one
      // plain generation makes at this position (one per position, from the
      // same random stream), so the output is the same with or without
      // guesses; for a deterministic guess this is the rejection rule itself
      // (kept with its probability, else a draw from the rest).
      if (static_cast<int>(r.tokens.size()) < params.min_tokens) MaskEnds(row, eog_ids, params);
      const int32_t id = sampler.Sample(row, history);
      const bool guessed = j < drafts.size() && id == drafts[j];
      const bool eog = !params.ignore_eos && model.IsEndOfGeneration(id);
      bool stop_token = false;
      for (int32_t s : params.stop_tokens) stop_token |= s == id;
      if (eog || stop_token) {
        r.finish_reason = "stop";
        done = true;
        break;
      }
      r.tokens.push_back(id);
      history.push_back(id);
      // Stop strings are looked for from the token after min_tokens on.
      emit(static_cast<int>(r.tokens.size()) <= params.min_tokens
               ? decoder.Push(id)
               : stops.Push(decoder.Push(id), &stop_string_hit));
      if (stop_string_hit || !keep_going) {
        r.finish_reason = "stop";
        done = true;
        break;
      }
      if (static_cast<int>(r.tokens.size()) == params.max_tokens) {
        done = true;
        break;
      }
      if (!guessed) {
        next = id;
        break;
      }
      ++accepted;
    }
    if (!drafts.empty()) {
      r.spec_proposed += static_cast<int>(drafts.size());
      r.spec_accepted += accepted;
      acceptance.Observe(static_cast<int>(drafts.size()), accepted);
      if (costly) probes.Observe(accepted);
    }
    if (done) break;
    // The rejected guesses leave the KV cache.
    seq->Truncate(seq->position() - (static_cast<int>(drafts.size()) - accepted));
    if (seq->position() + 1 > seq->capacity()) break;

    // The next pass: the new token, then the guesses after it.
    drafts.clear();
    if (proposer) {
      const int room = std::min(seq->capacity() - seq->position() - 1,
                                params.max_tokens - static_cast<int>(r.tokens.size()) - 1);
      int offered = std::min(spec.max_tokens, room);
      // A draft model's guesses cost passes: how many to check is chosen
      // first and only those are made. Model-free guesses are made first.
      if (costly) {
        if (spec.adaptive) offered = spec::UsefulGuesses(acceptance.rate(), offered);
      } else if (offered > 0) {
        proposer->Propose(history, offered, &drafts);
        offered = static_cast<int>(drafts.size());
      }
      const spec::Candidate c{acceptance.rate(), std::max(offered, 0)};
      int k = spec.adaptive
                  ? spec::ChooseGuesses(cost, 1, 1, std::span<const spec::Candidate>(&c, 1))[0]
                  : c.available;
      if (k > 0)
        acceptance.Used();
      else if (c.available > 0 && spec::GuessCouldPay(cost, 1, 1) &&
               (costly
                    ? draft_proposer->Behind(history) <= DraftRunner::kProbeCatchUp && probes.Due()
                    : acceptance.Probe()))
        k = 1;
      if (costly && k > 0) proposer->Propose(history, k, &drafts);
      drafts.resize(std::min(k, static_cast<int>(drafts.size())));
    }
    batch.assign(1, next);
    batch.insert(batch.end(), drafts.begin(), drafts.end());
    const auto s0 = Clock::now();
    BRAID_RETURN_IF_ERROR(seq->Eval(batch, &logits, !drafts.empty()));
    cost.Observe(static_cast<int>(batch.size()), Seconds(s0, Clock::now()));
    ++r.decode_steps;
  }
  // Release what the UTF-8 decoder and the stop matcher still hold, unless a
  // stop string ended the text.
  if (!stop_string_hit) {
    bool stopped = false;
    emit(stops.Push(decoder.Flush(), &stopped));
    if (!stopped) emit(stops.Flush());
  }
  r.decode_seconds = Seconds(t1, Clock::now());
  return r;
}

}  // namespace braid
