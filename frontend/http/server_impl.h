// The server's shared state and its two Asio layers: the listener
// (listener.cpp) accepts connections and starts a Session (session.cpp) for
// each. Internal to the server; server.cpp owns the threads and Stop.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "http/http_types.h"
#include "http/server.h"
#include "http/worker_pool.h"

namespace braid::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = boost::asio::ip::tcp;

class Session;

struct Server::Impl {
  Impl(const ServerOptions& o, const Router* r) : options(o), router(r) {}

  const ServerOptions options;
  std::atomic<const Router*> router;  // Server::SetRouter swaps it

  struct Counters {
    std::atomic<uint64_t> connections_open{0}, connections_total{0}, requests_total{0},
        rejected_busy{0}, rejected_connections{0}, rejected_auth{0}, rejected_malformed{0},
        timeouts{0}, streams_open{0}, streams_cancelled{0};
  } counters;
  std::atomic<bool> stopping{false};

  // Live sessions by id, so that Stop can reach them; each removes itself
  // when destroyed.
  std::mutex sessions_mu;
  std::map<uint64_t, std::weak_ptr<Session>> sessions;
  std::atomic<uint64_t> next_session_id{1};

  // Destroyed in reverse order: the pool (whose dropped tasks hold
  // sessions) and the acceptor before the io_context their sockets use.
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;  // on `accept_strand`
  std::optional<net::strand<net::io_context::executor_type>> accept_strand;
  std::optional<net::steady_timer> accept_retry;  // backs off after accept errors (EMFILE)
  std::unique_ptr<WorkerPool> pool;
  std::vector<std::thread> io_threads;
  int port = 0;
  // I/O threads that have returned from run(), for Stop's bounded wait.
  std::mutex done_mu;
  std::condition_variable done_cv;
  int io_done = 0;
};

// Starts accepting on impl->acceptor (bound and listening already).
void StartAccepting(Server::Impl* impl);
// Accepted, then answered 503 and closed: over max_connections.
void RejectConnection(tcp::socket socket);

// One connection: reads requests, admits them, hands them to the worker
// pool and writes the answers (whole or streamed). Every member is used on
// the connection's strand only, except where noted.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Impl* impl);
  ~Session();
  void Start();
  // Closes the connection and cancels its stream. Any thread (posts).
  void Shutdown();

 private:
  void ReadRequest();
  void OnFirstBytes(beast::error_code ec, size_t n);
  void ReadHeader();
  void OnHeaderBytes(beast::error_code ec, size_t n);
  void OnHeader();  // the header is read: check its framing, then the body
  void ReadBody();
  void OnBody(beast::error_code ec, size_t n);
  void OnReadError(beast::error_code ec);
  void Dispatch();
  // A handler is running: watch the connection so that a client leaving
  // signals its request's ClientGone; the answer waits for the watch to end.
  void WatchHandling();
  void OnWatchHandling(beast::error_code ec, size_t n);
  void OnHandled(Response response);
  // The client shut its sending side (read end of file) while a request is
  // handled or streamed: it may still read, so the answer goes on; a probe
  // written now finds out whether the connection is still there.
  void PeerDone();
  void OnBroken(beast::error_code ec);  // the connection broke after PeerDone
  void Send(Response response);
  void WriteWhole(Response response);
  void WriteWholeSome();  // the next piece of whole_, as the socket takes it
  void OnWritten(beast::error_code ec, size_t n);
  void Reject(int status, const std::string& message);
  void AfterResponse();

  void StartStream(Response response);
  void OnStreamHeader(beast::error_code ec, size_t n);
  void Wake();  // any thread: the stream has news
  void Pump();
  void WriteChunks();  // the next piece of chunks_out_ (at most kWriteSlice)
  void OnChunksWritten(beast::error_code ec, size_t n);
  void Watch();
  void OnWatch(beast::error_code ec, size_t n);
  void FinishStream();
  void DropStream(bool cancel);

  void Close();
  void LingerThenClose();
  void Drain();

  Server::Impl* const impl_;  // outlives every session (Server::Stop joins first)
  const uint64_t id_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::string peer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  size_t header_bytes_ = 0;  // of the request being read, for max_header_bytes
  bool first_request_ = true;
  bool peer_done_ = false;  // the client half-closed: no more requests after those buffered
  bool keep_alive_ = false;
  bool http10_ = false;  // the request was HTTP/1.0: no chunked streams
  bool closing_ = false;
  // A request must arrive whole by this time (set at its first byte).
  net::steady_timer::time_point read_deadline_;

  // The answer being written (whole), or the streamed answer's header.
  std::optional<bhttp::response<bhttp::string_body>> whole_;
  std::optional<bhttp::response_serializer<bhttp::string_body>> whole_serializer_;
  std::optional<bhttp::response<bhttp::empty_body>> stream_header_;
  std::optional<bhttp::response_serializer<bhttp::empty_body>> stream_serializer_;
  std::shared_ptr<EventStream> active_;
  std::string chunks_out_;  // framed chunks being written
  size_t chunks_sent_ = 0;  // of chunks_out_
  bool writing_ = false;
  bool final_chunk_ = false;
  bool watching_ = false;                 // a read is pending to notice the client leaving
  bool probing_ = false;                  // PeerDone's interim 100 is being written
  bool probe_stream_ = false;             // PeerDone asks the next Pump for the probe
  std::string stream_probe_;              // what the stream's probe writes (ProbeFor)
  bool stream_finished_ = false;          // the last chunk went out
  bool handling_ = false;                 // a handler runs for the current request
  std::shared_ptr<ClientGone> gone_;      // that request's signal
  std::optional<Response> handled_;       // its answer, while the watch read winds down
  std::atomic<bool> wake_posted_{false};  // any thread: coalesces wakeups
  // The stream again, for Shutdown from other threads.
  std::mutex shared_stream_mu_;
  std::shared_ptr<EventStream> shared_stream_;
};

}  // namespace braid::http
