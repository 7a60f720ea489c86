#include "exec/output_request.h"

#include <algorithm>
#include <memory>

#include "exec/token_mask.h"

namespace braid::rt {
namespace {

// The engine's scoring and logit-mask hooks are being added; these compile
// either way and report whether the field exists in this build.
template <typename Req>
bool SetScoreChoices(Req& r, std::vector<std::vector<int32_t>> choices) {
  if constexpr (requires { r.score_choices = choices; }) {
    r.score_choices = std::move(choices);
    return true;
  } else {
    return false;
  }
}
template <typename Comp>
std::optional<std::vector<double>> LogprobsOf(const Comp& c) {
  if constexpr (requires { c.choice_logprobs.size(); }) {
    std::vector<double> out;
    for (const auto& lp : c.choice_logprobs) out.push_back(static_cast<double>(lp));
    return out;
  } else {
    return std::nullopt;
  }
}
template <typename Req, typename Fn>
bool SetLogitsProcessor(Req& r, Fn fn) {
  if constexpr (requires { r.logits_processor = fn; }) {
    r.logits_processor = std::move(fn);
    return true;
  } else {
    return false;
  }
}

// A select's scoring request: the prompt to score after (the part of
// `prompt` every choice's tokens share) and each choice's tokens.
std::pair<std::vector<int32_t>, std::vector<std::vector<int32_t>>> ChoiceTokens(
    const Model& model, const CallPrompt& prompt, const std::vector<std::string>& choices) {
  // Each choice tokenized as the end of prompt + choice: where the two meet
  // (a space ending the prompt, a space starting the choice) the tokens are
  // the ones the tokenizer makes of the whole, so "Action: " + "calculator"
  // scores " calculator" as "Action:" + " calculator" does. The prompt scored
  // is the part every choice's tokens share with it; choices are template
  // literals, so they may name special tokens.
  const std::vector<int32_t>& tokens = prompt.tokens;
  std::vector<std::vector<int32_t>> full;
  size_t shared = tokens.size();
  for (const auto& choice : choices) {
    std::vector<PromptPiece> with_choice = prompt.pieces;
    AppendPiece(with_choice, choice, /*allow_special=*/true);
    full.push_back(model.Tokenize(with_choice));
    const auto& f = full.back();
    const size_t n = std::min(tokens.size(), f.size());
    size_t common =
        std::mismatch(tokens.begin(), tokens.begin() + static_cast<long>(n), f.begin()).first -
        tokens.begin();
    if (common == f.size()) common = 0;  // the choice added no token of its own
    shared = std::min(shared, common);
  }
  std::vector<std::vector<int32_t>> conts;
  if (shared > 0) {
    for (const auto& f : full) conts.emplace_back(f.begin() + static_cast<long>(shared), f.end());
    return {std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<long>(shared)),
            conts};
  }
  // No prompt token survives the meeting: each choice on its own after the
  // whole prompt.
  const std::vector<int32_t> bos = model.TokenizeRaw("");
  for (const auto& choice : choices) {
    std::vector<int32_t> alone = model.TokenizeRaw(choice);
    if (!bos.empty() && alone.size() > bos.size())
      alone.erase(alone.begin(), alone.begin() + static_cast<long>(bos.size()));
    conts.push_back(std::move(alone));
  }
  return {tokens, conts};
}

Status ScoringRequest(const Model& model, const OutputSpec& spec, const CallPrompt& prompt,
                      bool unconditional, std::vector<size_t>* choice_tokens,
                      GenerationRequest* r) {
  auto [scored, conts] = ChoiceTokens(model, prompt, spec.choices);
  choice_tokens->clear();
  for (const auto& c : conts) choice_tokens->push_back(c.size());
  // The unconditional pass scores the same tokens after no prompt (the
  // model's BOS, or a newline for a model without one).
  if (unconditional) {
    scored = model.TokenizeRaw("");
    if (scored.empty()) scored = model.TokenizeText("\n");
  }
  r->prompt = std::move(scored);
  r->sampling.max_tokens = 1;
  if (!SetScoreChoices(*r, std::move(conts)))
    return Status::Unsupported(
        "select output '" + spec.name +
        "' needs the engine's choice scoring (GenerationRequest::score_choices), "
        "which this build of the engine does not have");
  return Status::Ok();
}

Status MaskRequest(const Model& model, const OutputSpec& spec, GenerationRequest* r) {
  BRAID_ASSIGN_OR_RETURN(RegexDfa dfa, RegexDfa::Compile(spec.pattern));
  auto mask = std::make_shared<RegexMask>(std::make_shared<const RegexDfa>(std::move(dfa)),
                                          TokenTable::ForModel(model));
  auto fn = [mask](std::span<const int32_t> generated, std::span<float> logits) {
    (*mask)(generated, logits);
  };
  if (!SetLogitsProcessor(*r, std::move(fn)))
    return Status::Unsupported(
        "regex output '" + spec.name +
        "' needs the engine's logits hook (GenerationRequest::logits_processor), "
        "which this build of the engine does not have");
  return Status::Ok();
}

}  // namespace

bool NeedsLocal(const OutputSpec& spec) {
  return spec.kind == OutputSpec::Kind::kSelect || spec.kind == OutputSpec::Kind::kRegex;
}

Result<GenerationRequest> OutputRequest(const Model& model, const OutputSpec& spec,
                                        const CallPrompt& prompt, bool unconditional,
                                        std::vector<size_t>* choice_tokens) {
  GenerationRequest r;
  r.prompt = prompt.tokens;
  r.sampling.temperature = spec.temperature;
  r.sampling.top_p = spec.top_p;
  if (spec.seed) r.sampling.seed = *spec.seed;
  r.sampling.max_tokens = spec.max_tokens;
  r.sampling.min_tokens = std::min(spec.min_tokens, spec.max_tokens);
  r.sampling.stop = spec.stop;
  if (spec.kind == OutputSpec::Kind::kSelect) {
    BRAID_RETURN_IF_ERROR(ScoringRequest(model, spec, prompt, unconditional, choice_tokens, &r));
  } else if (spec.kind == OutputSpec::Kind::kRegex) {
    BRAID_RETURN_IF_ERROR(MaskRequest(model, spec, &r));
  }
  return r;
}

std::optional<std::vector<double>> ChoiceLogprobs(const Completion& c) { return LogprobsOf(c); }

SelectResult ChooseSelect(const OutputSpec& spec, const std::vector<double>& logprobs,
                          const std::optional<std::vector<double>>& conditional,
                          const std::vector<size_t>& choice_tokens) {
  using S = OutputSpec::Scoring;
  std::vector<double> score = logprobs;
  for (size_t i = 0; i < score.size(); ++i) {
    if (spec.scoring == S::kUnconditional) score[i] = (*conditional)[i] - score[i];
    if (spec.scoring != S::kSum)
      score[i] /= static_cast<double>(std::max<size_t>(1, choice_tokens[i]));
  }
  size_t best = 0;
  for (size_t i = 1; i < score.size(); ++i)
    if (score[i] > score[best]) best = i;
  SelectResult out;
  out.value = spec.choices[best];
  for (size_t i = 0; i < score.size(); ++i) out.scores.emplace_back(spec.choices[i], score[i]);
  return out;
}

}  // namespace braid::rt
