// What a caller asks of the serving engine, and what comes back.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampling.h"

namespace braid {

// The goal a request serves. Latency-class work is admitted first and runs in
// small steps so its per-token time holds; throughput-class work fills the
// rest of each step.
enum class GoalClass { kThroughput = 0, kLatency = 1 };
const char* GoalClassName(GoalClass g);

// The order of requests when nothing else decides it (the priority policy,
// and the last word under fair sharing): latency class first, then higher
// priority, then the earlier deadline (one before none), then the earlier
// arrival, then the lower id. The runtime submits its ready calls in this
// order too, so one rule orders a program's calls on both sides.
struct Urgency {
  GoalClass goal = GoalClass::kThroughput;
  int priority = 0;
  std::optional<double> deadline;  // absolute, any clock shared by the two
  double arrival = 0;
  uint64_t id = 0;
};
bool MoreUrgent(const Urgency& a, const Urgency& b);

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids; when empty, prompt_text is tokenized
  // Tokenized as plain text: special-token text stays text (a caller that
  // wants special tokens passes ids, e.g. from Model::Tokenize with pieces).
  std::string prompt_text;
  SamplingParams sampling;
  GoalClass goal = GoalClass::kThroughput;
  int priority = 0;                   // higher runs first within a goal class
  std::optional<double> deadline_ms;  // relative to submission; earlier deadlines first
  // Requests share prefix-cache entries only when their salts are equal
  // (one salt per tenant, or per security domain).
  uint64_t cache_salt = 0;
  int top_logprobs = -1;  // -1: none; 0: the sampled token's logprob; k: also the top k
  // Log-probabilities of the prompt's own tokens from this index on (each
  // given the tokens before it), returned in Completion::prompt_logprobs;
  // -1 = none. With max_tokens 0 the request only scores its prompt (how
  // `select` ranks choices).
  int prompt_logprobs_from = -1;
  // Called on the engine thread before each sampling step with the tokens
  // generated so far; may lower logits (e.g. to -inf) to constrain decoding.
  // Must be fast and must not block.
  std::function<void(std::span<const int32_t> generated, std::span<float> logits)> logits_processor;
  // When non-empty, nothing is generated: each continuation is scored after
  // the prompt (its total log-probability, in Completion::choice_logprobs).
  // The first choice computes the prompt; the rest reuse its cached KV.
  std::vector<std::vector<int32_t>> score_choices;
  std::string client;  // identity for fair sharing and accounting
  // The program (a DAG run) the call belongs to: under the vtc policy a
  // client's programs share its turn least-attained-service first; under
  // plas all programs do (empty: the call is a program of its own).
  std::string program;
  // With the suffix proposer: requests of the same non-empty group (the
  // calls of one semantic function) share an index of each other's
  // finished outputs, from which they guess their own.
  std::string spec_group;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the k most likely, descending
};

// One increment of a request's output.
struct Delta {
  std::vector<int32_t> tokens;
  std::string text;                    // UTF-8-safe, stop strings withheld
  std::vector<TokenLogprob> logprobs;  // one per token when asked
  bool finished = false;
  std::string finish_reason;  // "stop", "length", "cancelled", "error" when finished
  std::string error;          // set with finish_reason "error"
};

struct Usage {
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  int host_tokens = 0;    // of the others, those copied back from the host KV tier
  int generated_tokens = 0;
};

struct Timings {
  double queue_ms = 0;                 // submission to first scheduled step
  double ttft_ms = 0;                  // submission to first token
  double total_ms = 0;                 // submission to finish
  std::vector<double> inter_token_ms;  // gaps between consecutive tokens
};

// Everything a request produced, once finished.
struct Completion {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::vector<float> prompt_logprobs;  // for prompt tokens [prompt_logprobs_from, prompt_len)
  std::vector<float>
      choice_logprobs;  // per score_choices entry: sum of its tokens' log-probabilities
  std::string finish_reason;
  std::string error;
  Usage usage;
  Timings timings;
  int preemptions = 0;
  int spec_proposed = 0, spec_accepted = 0;  // guesses checked, and kept
};

}  // namespace braid
