// The OpenAI completions wire format, without I/O: the request body built
// from a GenerationRequest, the server-sent-events framing of the streamed
// reply, and the JSON of each streamed chunk.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "engine/status.h"

namespace braid::remote {

// The JSON body of a streamed POST /v1/completions: model, the prompt (token
// ids, or the text when there are none), max_tokens, temperature, top_p,
// seed, stop, penalties when set, stream with usage, logprobs when asked.
std::string CompletionRequestBody(const GenerationRequest& request, const std::string& model);

// Splits a byte stream into server-sent events and returns each event's data
// (its "data:" lines joined by '\n'). Comments, "event:", "id:" and
// "retry:" lines are skipped; lines may end in "\n" or "\r\n".
class SseReader {
 public:
  // Appends the data of every event completed by `bytes` to *events.
  void Feed(std::string_view bytes, std::vector<std::string>* events);
  // The stream ended: an event that was not closed by a blank line.
  std::optional<std::string> Finish();

 private:
  void Line(std::string_view line, std::vector<std::string>* events);
  std::string partial_;  // an incomplete line
  std::string data_;     // the current event's data so far
  bool has_data_ = false;
};

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

// The message of an OpenAI-style error body ({"error": {"message": ...}},
// {"error": "..."}, {"message": ...}, {"detail": ...}), else the body's start.
std::string ErrorBodyMessage(std::string_view body);

}  // namespace braid::remote
