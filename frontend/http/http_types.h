// The HTTP server's plain data: a request as the router sees it, a response
// (whole, or a stream of server-sent events), the router that maps one to the
// other, and the OpenAI-shaped JSON error. Nothing here does I/O: a router is
// testable without sockets (frontend/http/router_test.cpp); sessions
// (session.cpp) move bytes between sockets and these types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::http {

// Signalled when the client disconnects while its request is being handled
// (the session watches the connection while a handler runs): a handler
// waiting on long work registers a hook that stops it. Thread-safe.
class ClientGone {
 public:
  bool gone() const;
  // Runs `fn` once the client is gone (at once if it already is). Hooks run
  // on a session thread and must not block.
  void OnGone(std::function<void()> fn);
  void Signal();

 private:
  mutable std::mutex mu_;
  bool gone_ = false;
  std::vector<std::function<void()>> hooks_;
};

struct Request {
  std::string method;  // "GET", "POST", "DELETE", "OPTIONS", ...
  std::string target;  // as received: "/v1/runs?limit=5"
  std::string path;    // the target's path, percent-decoded, without the query
  std::map<std::string, std::string> query;    // decoded query parameters
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  // The API key's identity (the name given to the key in the key file), set
  // by the session once the key is checked; "" when the server has no keys.
  std::string client;
  // The key's role is admin (ServerOptions::admin_clients): it may see what
  // every client made. Set by the session with `client`.
  bool admin = false;
  std::string peer;  // "address:port" of the connection
  // Set by the session; null for requests made without one (tests).
  std::shared_ptr<ClientGone> client_gone;
};

// What a request may see of what clients made (runs, sessions, per-client
// figures; docs/http-api.md, "Clients and ownership"). `keyed`: the server
// has API keys. Without keys every request sees everything; with them an
// admin key sees everything and any other key only what its own client made
// (nothing, should a request carry no client).
inline bool SeesAll(const Request& r, bool keyed) { return !keyed || r.admin; }
inline bool MaySee(const Request& r, bool keyed, std::string_view owner) {
  return SeesAll(r, keyed) || (!r.client.empty() && r.client == owner);
}

// The body of a streamed response, produced over time (server-sent events
// or any chunked body). Thread safety: producers call Send/Close/cancelled
// from any thread; the session calls the rest.
class EventStream {
 public:
  // `max_queued_bytes`: what Send may let wait unsent; a client that reads
  // slower than the producer writes is disconnected past it.
  explicit EventStream(size_t max_queued_bytes = size_t{8} << 20)
      : max_queued_bytes_(max_queued_bytes) {}

  // Queues body bytes (for SSE, one SseEvent(...) per call). Returns false
  // when the client is gone or too slow (the stream is cancelled then): the
  // producer stops and releases what it holds.
  bool Send(std::string chunk);
  // Queues the producer's last bytes (a run's result, however large) and
  // closes: unlike Send's, they are not held to max_queued_bytes, which
  // bounds what piles up for a slow client while more is coming, not the
  // size of an answer. Returns false as Send does.
  bool Finish(std::string last);
  // The producer is done; the session ends the response after what is queued.
  void Close();
  // Runs `fn` once when the stream is cancelled (the client disconnected, or
  // the server stops) before Close; at once if it already was. Set it before
  // the first Send. `fn` runs on a session thread and must not block.
  void OnCancel(std::function<void()> fn);
  bool cancelled() const;

  // -- session side --
  // Called (any thread, with no lock held) whenever chunks arrive or the
  // stream closes or is cancelled (a producer's Send past the byte cap
  // cancels it, and the session must then end the response).
  void SetWaker(std::function<void()> waker);
  // Moves the queued chunks into *out; *closed is true once Close was called
  // and nothing is left.
  void Take(std::vector<std::string>* out, bool* closed);
  void Cancel();

 private:
  mutable std::mutex mu_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  size_t max_queued_bytes_;
  bool closed_ = false;
  bool cancelled_ = false;
  std::function<void()> on_cancel_;
  std::function<void()> waker_;
};

// "data: <payload>\n\n" (payload lines split into several data: lines), with
// "event: <name>\n" first when `event` is not empty.
std::string SseEvent(std::string_view payload, std::string_view event = {});

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  std::string body;
  // Set: the body is this stream (chunked transfer encoding; for SSE use
  // content type "text/event-stream"); `body` is ignored. Between chunks
  // the session may add an SSE comment line (text/event-stream) or a
  // newline (application/json), so chunks of those must end at an event or
  // between JSON texts or tokens.
  std::shared_ptr<EventStream> stream;
};

// Path parameters: "/v1/runs/{id}" matched against "/v1/runs/r42" gives {"id": "r42"}.
using Params = std::map<std::string, std::string>;
// A route's handler. Handlers run on the server's worker pool (never on an
// I/O thread), so they may block, but only briefly or up to a timeout the
// request bounded; they must not throw.
using Handler = std::function<Response(const Request&, const Params&)>;

// Maps (method, path) to handlers. Patterns are literal segments and
// "{name}" segments (one whole segment each). Thread safety: Add before
// serving; Handle from any thread.
class Router {
 public:
  void Add(std::string method, std::string pattern, Handler handler);
  // The matching route's response; 404 (no route for the path) or 405 (the
  // path exists, not with this method; an Allow header lists those that do)
  // in the JSON error shape otherwise.
  Response Handle(const Request& request) const;

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    Handler handler;
  };
  std::vector<Route> routes_;
};

// {"error": {"message": ..., "type": ..., "param": ..., "code": ...}} with
// `status`: OpenAI's error shape, used by every route. `type` defaults from
// the status (400 invalid_request_error, 401 authentication_error, 404
// not_found_error, 413/429 ..., 5xx server_error).
Response JsonError(int status, std::string message, std::string type = {}, std::string param = {},
                   std::string code = {});
// A JSON body with `status`.
Response JsonResponse(int status, std::string body);

}  // namespace braid::http
