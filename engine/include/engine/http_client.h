// A small HTTP/1.1 client: one blocking exchange over a fresh connection,
// with the response body handed over as it arrives (chunked or not),
// deadlines on every step and an Abort that any thread may call; the
// server-sent-events framing of a streamed body; the message of a JSON error
// body. The remote engine talks to OpenAI-compatible servers with it, and
// `braid repl --server` to a braid serve. Asio and Beast stay in the .cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/status.h"

namespace braid::remote {

// "http://host:port/prefix" taken apart.
struct HttpUrl {
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // "" or "/prefix", never ending in '/'
};

// Takes apart "http://host[:port][/prefix]" (an IPv6 host in brackets); a
// trailing "/v1" of the prefix is dropped, as OpenAI clients' base URLs carry
// it. Errors: kUnsupported for https, kInvalidArgument for anything else
// malformed (no host, a bad port, user info, a query).
Result<HttpUrl> ParseHttpUrl(const std::string& url);

struct HttpRequestSpec {
  std::string method = "GET";
  std::string target;  // path and query
  std::string body;    // sent with Content-Type: application/json when not empty
  std::vector<std::pair<std::string, std::string>> headers;
  int connect_timeout_ms = 2000;
  int first_timeout_ms = 60000;  // writing the request, the headers, the first body read
};

// How an exchange ended.
enum class HttpFailure {
  kNone,       // a complete response (any status)
  kConnect,    // could not connect: refused, unreachable, timed out
  kClosed,     // the connection was reset or closed before the response ended
  kTimeout,    // a deadline passed after connecting
  kCancelled,  // Abort() or the body callback stopped it
  kProtocol,   // not a valid HTTP response
};

struct HttpOutcome {
  HttpFailure failure = HttpFailure::kNone;
  bool connected = false;  // the connection was made
  int status = 0;          // the response's status, once its headers arrived
  std::string error;       // what went wrong, for messages
  std::string error_body;  // start of the body of a non-2xx response (up to 4 KB)
};

class HttpCall {
 public:
  HttpCall();
  ~HttpCall();
  HttpCall(const HttpCall&) = delete;
  HttpCall& operator=(const HttpCall&) = delete;

  // Connects, sends `spec` and reads the response. The body of a 2xx
  // response goes to on_body piece by piece; it returns how long to wait for
  // the next bytes in milliseconds, or 0 to stop reading (kCancelled). May be
  // called once per HttpCall.
  HttpOutcome Run(const HttpUrl& url, const HttpRequestSpec& spec,
                  const std::function<int(std::string_view)>& on_body);
  // Closes the connection: Run returns kCancelled soon after. Thread-safe;
  // before Run, Run returns at once.
  void Abort();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits a byte stream into server-sent events and returns each event's data
// (its "data:" lines joined by '\n'). Comments, "event:", "id:" and
// "retry:" lines are skipped; lines may end in "\n" or "\r\n". One thread
// at a time.
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

// The message of an OpenAI-style error body ({"error": {"message": ...}},
// {"error": "..."}, {"message": ...}, {"detail": ...}), else the body's start.
std::string ErrorBodyMessage(std::string_view body);

}  // namespace braid::remote
