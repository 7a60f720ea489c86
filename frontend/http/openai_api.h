// The OpenAI-compatible API on the router: /v1/models, /v1/models/{id},
// /v1/completions, /v1/chat/completions (whole or streamed as server-sent
// events), and vLLM's /tokenize and /detokenize. Requests are validated
// (400 in OpenAI's error shape naming the param; 404 model_not_found for
// another model's name), tokenized with one tokenizer, and sent to one of
// several engines as the runtime's placement service chooses
// (runtime/placement.h: among the engines that are alive, and local for a
// response_format constraint, by default the one holding the longest cached
// prefix of the prompt among those not far busier than the least loaded).
// No engine that can take it is 503; a full engine queue is 429 with
// Retry-After.
//
// Semantics follow OpenAI's and vLLM's servers; the differences:
// - completions: `prompt` is one string, a list of one string, or token ids
//   (a list of ints, or a list of one such list); batched prompts, `echo`,
//   `suffix`, `best_of` > 1 and `logit_bias` are refused (400). A string
//   prompt is tokenized as its author's own text: special-token text in it
//   ("<|im_start|>") becomes special ids, as vLLM does. `logprobs` k is at
//   most 20; text_offset counts from the start of the choice's text.
// - chat: roles system, developer (as system), user, assistant; content a
//   string or a list of {"type": "text"} parts; tools are refused (400).
//   max_tokens defaults to what the context leaves.
// - both: response_format json_object / json_schema constrain decoding
//   (http/json_schema.h). `seed` absent draws a fresh one; choice i of n
//   uses seed + i. All n choices go to one engine.
//   Extra sampling fields as vLLM takes them: top_k, min_p,
//   repetition_penalty, ignore_eos. Unknown fields are ignored.
// - a client that disconnects from a stream cancels its engine requests at
//   once; an engine error mid-stream is an event {"error": {...}} and then
//   [DONE].
//
// Threading: handlers run on the server's worker threads; a non-streaming
// request blocks its worker until the engine finishes; a streaming one
// returns at once and its events are produced on the engine's thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "http/http_types.h"
#include "http/metrics.h"
#include "runtime/placement.h"

namespace braid::http {

struct OpenAiOptions {
  // The id /v1/models lists; requests must name it or omit `model`. Empty:
  // any name is accepted.
  std::string model_name;
  // Tokenization and the chat template (not owned; outlives the service).
  const Model* tokenizer = nullptr;
  // Where requests go (not owned; outlive the service). At least one.
  std::vector<Engine*> engines;
  int max_n = 16;   // the largest `n`
  int context = 0;  // tokens a request may span (prompt + max_tokens); 0 = tokenizer's context
  GoalClass goal = GoalClass::kLatency;  // the class API requests run in
  // Prefix-cache sharing: false = all clients share cached prefixes; true =
  // each client (Request::client) only its own (a salt per client).
  bool cache_per_client = false;
  ServingMetrics* metrics = nullptr;  // where timings and tokens go (not owned); null: none
  // Which engine takes a request: the runtime's service (Runtime::placement),
  // so both place by the same rules and policy state. Null: a service of
  // its own over `engines` by cached prefix and load.
  std::shared_ptr<const rt::EnginePlacement> placement;
};

// The API's state (options, compiled response_format constraints). Methods
// are the routes' handlers; thread-safe; they never throw.
class OpenAiService {
 public:
  explicit OpenAiService(OpenAiOptions options);
  ~OpenAiService();
  OpenAiService(const OpenAiService&) = delete;
  OpenAiService& operator=(const OpenAiService&) = delete;

  Response ListModels(const Request& request) const;
  Response GetModel(const Request& request, const std::string& id) const;
  Response Completions(const Request& request);
  Response ChatCompletions(const Request& request);
  // {"prompt": "..."} or {"messages": [...], "add_generation_prompt": bool}
  // -> {"tokens": [...], "count": N, "max_model_len": C}.
  Response Tokenize(const Request& request) const;
  // {"tokens": [...]} -> {"prompt": "..."}.
  Response Detokenize(const Request& request) const;

  const OpenAiOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Adds the routes above to `router` (before it serves); they share `service`.
void AddOpenAiRoutes(Router* router, std::shared_ptr<OpenAiService> service);

}  // namespace braid::http
