// How one output of a call is asked of an engine, and how a select's
// scores become its value: the sampling of a gen, the scoring request of a
// select (each choice's tokens as a continuation of the prompt), the logits
// mask of a regex.
//
// Pure functions of their arguments; the model only tokenizes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "exec/prompt.h"
#include "runtime/runtime.h"

namespace braid::rt {

// Select outputs score choices and regex outputs mask logits: both need the
// model in this process (PlacementNeeds::needs_local).
bool NeedsLocal(const OutputSpec& spec);

// The engine request for `spec` after `prompt`, without its goal and
// identity (the caller's). A select's request scores its choices and
// *choice_tokens receives each choice's token count; `unconditional` asks
// for the second pass of OutputSpec::Scoring::kUnconditional (the same
// choice tokens after no prompt). Unsupported when the engine's build lacks
// the field a select or regex needs; a regex's pattern errors as compiled.
Result<GenerationRequest> OutputRequest(const Model& model, const OutputSpec& spec,
                                        const CallPrompt& prompt, bool unconditional,
                                        std::vector<size_t>* choice_tokens);

// The engine's scores of a select's choices (Completion::choice_logprobs),
// nullopt when the engine's build has no such field.
std::optional<std::vector<double>> ChoiceLogprobs(const Completion& c);

struct SelectResult {
  std::string value;    // the best choice
  ChoiceScores scores;  // every choice's score, in order
};
// A select's choice from `logprobs` (one per choice, totals over its
// tokens) as `spec.scoring` ranks them: kUnconditional subtracts them from
// `conditional` (the first pass's), and all but kSum divide by each
// choice's token count. The first of equal scores wins.
SelectResult ChooseSelect(const OutputSpec& spec, const std::vector<double>& logprobs,
                          const std::optional<std::vector<double>>& conditional,
                          const std::vector<size_t>& choice_tokens);

}  // namespace braid::rt
