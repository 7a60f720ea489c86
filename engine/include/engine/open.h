// Opening engines. The three kinds the command line opens:
//  - embedded: Engine::Open (engine/engine.h) on one device;
//  - one embedded engine per GPU, or per group of GPUs: ExpandDevices turns
//    a device list into the device of each engine, then Engine::Open each;
//  - remote: OpenRemoteEngine below, an OpenAI-compatible server.
//
// The remote engine is an Engine that runs elsewhere: an OpenAI-compatible server (another
// `braid serve`, vLLM, SGLang, llama.cpp's llama-server) reached over HTTP.
//
// Each request is one streamed POST {url}/v1/completions whose prompt is the
// request's token ids (those servers take a token-id array as the prompt), so
// the caller tokenizes with its own copy of the model and the server must run
// the same vocabulary. The reply's SSE chunks become Deltas as they arrive.
//
// What differs from the embedded engine:
//  - Delta::tokens and Completion::tokens stay empty: a completions stream
//    carries text, not ids. Usage comes from the server's final usage chunk
//    (prompt, cached and generated token counts); a server that sends none
//    leaves generated_tokens as the number of chunks that carried text.
//  - Logprobs, when asked (top_logprobs >= 0), carry the sampled tokens'
//    log-probabilities with id -1 and no top list (the stream names tokens by
//    their text, not their ids).
//  - The server applies its own top_k and min_p; temperature, top_p, seed,
//    stop strings, penalties and max_tokens are sent.
//  - Prompt scoring (prompt_logprobs_from), choice scoring (score_choices)
//    and logits processors cannot cross the wire: Submit refuses them.
//  - ProbePrefix cannot see the server's cache; it answers from a memory of
//    the prompts this engine sent recently (16-token blocks, hash-chained,
//    least recently sent forgotten first), so that callers that place work
//    by cached prefix keep sending similar prompts to the same server.
//    Pin and Unpin do nothing.
//  - model() is null.
//
// Failures: a request that fails before any text reached the caller is
// retried when the server refused or dropped the connection or answered 5xx
// or 429 (max_retries, backoff_ms); any other failure, and every failure
// after text, finishes it with reason "error" and a message that starts
// "remote engine <url>: ". Cancel closes the connection, which is how these
// servers learn to stop.
//
// Threads: one thread per request in flight (at most max_in_flight; Submit
// refuses beyond) plus one that probes GET {url}/health while the server is
// considered down. Callbacks run on the request's thread. Shutdown (also run
// by the destructor) cancels what is in flight and returns once every
// request delivered its final delta; it must not be called from a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/status.h"

namespace braid {

// The devices a stack's engines run on, one engine each: "cuda:all" is every
// visible GPU (cuda:0 .. cuda:N-1), "cuda:0,2" those listed, anything else
// the one device ModelOptions::device names ("cpu", "cuda", "cuda:N",
// "cuda:N+M"). With tensor_parallel > 1 the GPUs go in groups of that many,
// one engine per group ("cuda:all" on four GPUs with 2: cuda:0+1 and
// cuda:2+3). Any thread. Errors (kInvalidArgument): an unknown device name, a
// GPU listed twice, "cuda:all" where no GPU is visible, GPUs that do not
// split into groups of tensor_parallel.
Result<std::vector<std::string>> ExpandDevices(const std::string& device, int tensor_parallel = 1);

struct RemoteEngineOptions {
  // "http://host:port", optionally with a path prefix ("http://h:8000/v1"
  // and "http://h:8000" name the same server). https is not supported.
  std::string url;
  std::string model;    // the "model" field of each request (the server's name for it)
  std::string api_key;  // sent as "Authorization: Bearer <key>" when not empty
  int connect_timeout_ms = 2000;
  int first_token_timeout_ms = 60000;  // from sending the request to the first text
  int idle_timeout_ms = 30000;         // between streamed chunks once text flows
  // Retries of a request that failed before any text was delivered: the
  // connection was refused or reset, or the server answered 5xx or 429.
  int max_retries = 3;
  int backoff_ms = 200;  // before the first retry; doubles each time, with jitter
  int max_in_flight = 64;
  // After this many connection failures in a row, or when a stream broke
  // (closed or stalled) and GET {url}/health then failed, the engine is not
  // alive() until GET {url}/health answers 2xx; that probe runs every
  // health_interval_ms while the engine is down.
  // Set: prompts go as text, this function's rendering of the token ids,
  // for servers that take no token-id prompts (llama-cpp-python's); the
  // server then tokenizes them again. Called on the submitting thread.
  std::function<std::string(const std::vector<int32_t>&)> detokenize;
  int max_connect_failures = 3;
  int health_interval_ms = 2000;
};

// Checks the options (the URL's form, positive limits) and starts the health
// prober. Does not contact the server. Errors: kUnsupported for https,
// kInvalidArgument for a malformed URL or a non-positive limit.
Result<std::unique_ptr<Engine>> OpenRemoteEngine(const RemoteEngineOptions& options);

}  // namespace braid
