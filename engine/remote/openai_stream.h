// The OpenAI completions wire format, without I/O: the request body built
// from a GenerationRequest and the JSON of each streamed chunk (the
// server-sent-events framing is engine/http_client.h's SseReader).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/http_client.h"
#include "engine/request.h"
#include "engine/status.h"

namespace braid::remote {

// The JSON body of a streamed POST /v1/completions: model, the prompt (token
// ids, or the text when there are none), max_tokens, temperature, top_p,
// seed, stop, penalties when set, stream with usage, logprobs when asked.
std::string CompletionRequestBody(const GenerationRequest& request, const std::string& model);

// One streamed chunk of a completion.
struct CompletionChunk {
  bool done = false;            // the "[DONE]" sentinel
  std::string text;             // choices[0].text
  std::string finish_reason;    // choices[0].finish_reason when not null
  std::vector<float> logprobs;  // choices[0].logprobs.token_logprobs
  bool has_usage = false;
  Usage usage;        // prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens
  std::string error;  // an {"error": ...} chunk's message
};

// Parses one event's data. Errors (kCorruption): not JSON, not an object,
// fields of the wrong type.
Result<CompletionChunk> ParseCompletionChunk(std::string_view data);

}  // namespace braid::remote
