// The HTTP/1.1 server: a listener accepting connections, one session per
// connection (keep-alive, timeouts, limits, API keys, CORS, chunked streams)
// and a bounded pool of worker threads running the router's handlers. The
// router (http_types.h) decides what a request means; everything here moves
// bytes and enforces limits. Boost.Asio/Beast stay inside the .cpp files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"
#include "http/http_types.h"

namespace braid::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;        // 0: any free port (read it back with Server::port())
  int io_threads = 2;  // threads running socket I/O; they never run handlers
  int workers = 64;    // threads running handlers (which may block briefly)
  // Requests waiting for a free worker; one more is answered 429 with
  // "Retry-After: 1" instead of queueing without bound.
  size_t max_pending = 256;
  // Open connections; one more is accepted, answered 503 and closed.
  size_t max_connections = 1024;
  // A larger body is answered 413 (JSON error) as soon as its Content-Length
  // is read, before the body is; a chunked body as soon as it passes this.
  size_t max_body_bytes = size_t{8} << 20;
  size_t max_header_bytes = size_t{16} << 10;  // larger headers: 431
  // A request must arrive whole within this from its first byte (or from
  // the accept, for a connection's first request); otherwise the connection
  // is closed without an answer (a slowloris client holds nothing for long).
  int read_timeout_ms = 30000;
  int idle_timeout_ms = 60000;  // a keep-alive connection waiting for its next request
  // Each piece of an answer must be written within this (what the socket
  // takes at a time of a whole answer, at most 1 MiB of a stream's chunks):
  // a client that stops reading is let go; a large answer is not cut.
  int write_timeout_ms = 30000;
  // API key -> client name (see ReadApiKeys). Empty: no authentication.
  std::map<std::string, std::string> api_keys;
  // Client names whose keys are admin keys (Request::admin): they see every
  // client's runs, sessions and figures (docs/http-api.md, "Clients and
  // ownership").
  std::set<std::string> admin_clients;
  // "" : no CORS headers and no preflight handling (OPTIONS goes to the
  // router like any method). Otherwise every response carries
  // Access-Control-Allow-Origin: <cors_origin>, and OPTIONS requests are
  // answered 204 by the server itself, without authentication.
  std::string cors_origin;
  // Paths (exact, after percent-decoding) served without an API key.
  std::vector<std::string> public_paths = {"/health"};
  // Paths (exact) whose GET handlers run on the I/O thread, never queued
  // behind the workers: the liveness probe and the metrics scrape answer
  // while every worker is held (a non-streamed completion holds one for its
  // whole generation). Their handlers must be quick and never block.
  std::vector<std::string> inline_paths = {"/health", "/metrics"};
};

// A running server. Thread safety: all methods may be called from any
// thread; Stop and the destructor must not be called from a handler.
class Server {
 public:
  // Binds host:port and starts serving with `router` (not owned; it must
  // outlive the server). Errors: InvalidArgument for a null router or
  // options out of range (no threads, port outside 0..65535, a timeout not
  // positive, a host that is not an IP address);
  // IoError naming host:port and the reason when the address cannot be bound.
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options, const Router* router);
  ~Server();  // Stop()s

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;  // the bound port (the chosen one when options.port was 0)

  // Routes the requests read from now on with `router` (not owned; it must
  // outlive the server): a server listens while its model loads, then
  // serves. Requests already routed finish with the old one.
  void SetRouter(const Router* router);

  // Closes the listening socket: new connections are refused; those open
  // go on (a draining server). Idempotent; Stop does it too.
  void StopAccepting();

  // Stops accepting, cancels open event streams (their OnCancel hooks run),
  // closes every connection, waits for running handlers to return and joins
  // all threads. Requests still waiting for a worker are dropped. Idempotent.
  void Stop();

  // Counters since Start (for /metrics); the *_open and queued ones are
  // current values, the others only grow.
  struct Stats {
    uint64_t connections_open = 0;
    uint64_t connections_total = 0;
    uint64_t requests_total = 0;        // requests read whole (whatever the answer)
    uint64_t requests_queued = 0;       // waiting for a worker now
    uint64_t requests_running = 0;      // in a handler now
    uint64_t rejected_busy = 0;         // 429: the worker queue was full
    uint64_t rejected_connections = 0;  // 503: max_connections reached
    uint64_t rejected_auth = 0;         // 401
    uint64_t rejected_malformed = 0;    // 400, 413, 431 before routing
    uint64_t timeouts = 0;              // connections closed by a read or write timeout
    uint64_t streams_open = 0;
    uint64_t streams_cancelled = 0;  // by a client leaving, a slow client or Stop
  };
  Stats stats() const;

  struct Impl;  // server_impl.h

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// An API key file: key -> client name, the shares of fair sharing the
// file gives (client name -> weight; clients not named have weight 1), and
// the clients whose role is admin.
struct ApiKeyFile {
  std::map<std::string, std::string> keys;
  std::map<std::string, double> weights;
  std::set<std::string> admins;
};

// Reads an API key file: one key per line, either "NAME KEY" (separated by
// spaces or tabs), optionally followed by options in any order, or just
// "KEY" (the name is then "key<line number>"; no options). Options:
// "weight=W" (the client's share under fair sharing, W in (0, 1e6]; a name
// with several keys has one weight) and "role=admin" or "role=user" (the
// default; an admin sees every client's runs and figures; all the keys of a
// name have one role).
// Blank lines and lines starting with '#' are ignored. Keys are at least 8
// characters of printable ASCII; names are letters, digits and "_-.@".
// Errors (each naming the file, and the line when
// there is one): the file cannot be read (IoError), a duplicate key, a short
// key, a name with odd characters, a bad weight or two weights for one name,
// a bad role or two roles for one name, an option given twice or any other
// field, or no key at all (InvalidArgument: an empty file must not silently
// turn authentication off).
Result<ApiKeyFile> ReadApiKeys(const std::string& path);

// The name of the client whose key equals `presented`, or nullopt. Every
// configured key is compared, each in time that depends only on the two
// lengths (no early exit at the first differing byte), so the timing of an
// answer says nothing about how much of a key a guess got right.
std::optional<std::string> MatchApiKey(const std::map<std::string, std::string>& keys,
                                       std::string_view presented);

}  // namespace braid::http
