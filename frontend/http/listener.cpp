// The listener: accepts connections, each onto its own strand, and starts
// a Session for it, or turns it away with 503 past max_connections.
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>

#include "http/server_impl.h"

namespace braid::http {

namespace {

void DoAccept(Server::Impl* impl);

void OnAccept(Server::Impl* impl, beast::error_code ec, tcp::socket socket) {
  if (impl->stopping || ec == net::error::operation_aborted) return;
  if (ec) {
    // Out of file descriptors (EMFILE) and the like: accepting again at
    // once would spin; wait a little for connections to close.
    std::fprintf(stderr, "http: accept failed: %s\n", ec.message().c_str());
    impl->accept_retry->expires_after(std::chrono::milliseconds(100));
    impl->accept_retry->async_wait([impl](beast::error_code wec) {
      if (!wec && !impl->stopping) DoAccept(impl);
    });
    return;
  }
  if (impl->counters.connections_open >= impl->options.max_connections) {
    impl->counters.rejected_connections++;
    RejectConnection(std::move(socket));
  } else {
    std::make_shared<Session>(std::move(socket), impl)->Start();
  }
  DoAccept(impl);
}

void DoAccept(Server::Impl* impl) {
  impl->acceptor->async_accept(
      net::make_strand(impl->ioc),
      [impl](beast::error_code ec, tcp::socket socket) { OnAccept(impl, ec, std::move(socket)); });
}

// A connection over the limit: the 503, then FIN, then a second of reading
// and discarding (so that the client's unread request does not turn our
// close into a reset that loses the 503).
struct Refusal : std::enable_shared_from_this<Refusal> {
  explicit Refusal(tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
  char scratch[1024];

  void Start() {
    static const std::string kAnswer = [] {
      std::string body = JsonError(503, "too many connections; retry shortly").body;
      return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
             "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body;
    }();
    stream.expires_after(std::chrono::seconds(1));
    net::async_write(stream, net::buffer(kAnswer),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->stream.close();
                       beast::error_code sec;
                       self->stream.socket().shutdown(tcp::socket::shutdown_send, sec);
                       self->Drain();
                     });
  }
  void Drain() {
    stream.async_read_some(net::buffer(scratch),
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             if (ec) return self->stream.close();
                             self->Drain();
                           });
  }
};

}  // namespace

void StartAccepting(Server::Impl* impl) {
  net::dispatch(*impl->accept_strand, [impl] { DoAccept(impl); });
}

void RejectConnection(tcp::socket socket) { std::make_shared<Refusal>(std::move(socket))->Start(); }

}  // namespace braid::http
