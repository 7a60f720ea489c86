// Server: binds, owns the I/O threads and the worker pool, and stops them
// in an order that lets every connection end cleanly.
#include "http/server.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <exception>

#include "http/server_impl.h"

namespace braid::http {

namespace {

// How long Stop waits for connections to wind down after closing them
// before it stops the io_context outright.
constexpr auto kStopGrace = std::chrono::seconds(3);

void RunIo(Server::Impl* impl) {
  // A handler that throws would otherwise end the thread and the process.
  while (true) {
    try {
      impl->ioc.run();
      break;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "http: I/O thread caught: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "http: I/O thread caught a non-exception\n");
    }
  }
  {
    std::lock_guard<std::mutex> lock(impl->done_mu);
    ++impl->io_done;
  }
  impl->done_cv.notify_all();
}

Status CheckOptions(const ServerOptions& o, const Router* router) {
  if (router == nullptr) return Status::InvalidArgument("no router");
  if (o.io_threads < 1) return Status::InvalidArgument("io_threads must be at least 1");
  if (o.workers < 1) return Status::InvalidArgument("workers must be at least 1");
  if (o.port < 0 || o.port > 65535) {
    return Status::InvalidArgument("port " + std::to_string(o.port) + " is outside 0..65535");
  }
  if (o.read_timeout_ms <= 0 || o.idle_timeout_ms <= 0 || o.write_timeout_ms <= 0) {
    return Status::InvalidArgument("timeouts must be positive");
  }
  return Status::Ok();
}

}  // namespace

void Server::SetRouter(const Router* router) {
  if (router) impl_->router.store(router);
}

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, const Router* router) {
  BRAID_RETURN_IF_ERROR(CheckOptions(options, router));
  const std::string where = options.host + ":" + std::to_string(options.port);
  beast::error_code ec;
  net::ip::address address = net::ip::make_address(options.host, ec);
  if (ec) {
    return Status::InvalidArgument("host \"" + options.host + "\" is not an IP address");
  }
  auto impl = std::make_unique<Impl>(options, router);
  impl->accept_strand.emplace(net::make_strand(impl->ioc));
  impl->acceptor.emplace(*impl->accept_strand);
  impl->accept_retry.emplace(*impl->accept_strand);
  tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  tcp::acceptor& acceptor = *impl->acceptor;
  if (acceptor.open(endpoint.protocol(), ec); ec) {
    return Status::IoError("cannot open a socket for " + where + ": " + ec.message());
  }
  // A restarted server can bind while old connections sit in TIME_WAIT.
  acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (acceptor.bind(endpoint, ec); ec) {
    return Status::IoError("cannot bind " + where + ": " + ec.message());
  }
  if (acceptor.listen(net::socket_base::max_listen_connections, ec); ec) {
    return Status::IoError("cannot listen on " + where + ": " + ec.message());
  }
  impl->port = acceptor.local_endpoint(ec).port();
  if (ec) return Status::IoError("cannot read the bound port of " + where + ": " + ec.message());

  impl->pool = std::make_unique<WorkerPool>(options.workers, options.max_pending);
  impl->work.emplace(net::make_work_guard(impl->ioc));
  StartAccepting(impl.get());
  for (int i = 0; i < options.io_threads; ++i) {
    impl->io_threads.emplace_back([p = impl.get()] { RunIo(p); });
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { Stop(); }

int Server::port() const { return impl_->port; }

void Server::StopAccepting() {
  Impl* impl = impl_.get();
  net::post(*impl->accept_strand, [impl] {
    beast::error_code ec;
    impl->acceptor->close(ec);
    impl->accept_retry->cancel();
  });
}

void Server::Stop() {
  Impl* impl = impl_.get();
  if (impl->stopping.exchange(true)) return;
  // 1. No new connections.
  StopAccepting();
  // 2. Every connection closes; its stream, if any, is cancelled at once.
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(impl->sessions_mu);
    for (auto& [id, weak] : impl->sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->Shutdown();
  live.clear();
  // 3. Running handlers return (their answers find closed sessions);
  //    waiting ones are dropped.
  impl->pool->Stop();
  // 4. With no work left the I/O threads return from run(); a connection
  //    that somehow still waits is cut off after the grace period.
  impl->work.reset();
  {
    std::unique_lock<std::mutex> lock(impl->done_mu);
    if (!impl->done_cv.wait_for(lock, kStopGrace, [impl] {
          return impl->io_done == static_cast<int>(impl->io_threads.size());
        })) {
      std::fprintf(stderr, "http: connections still open after %llds; stopping I/O\n",
                   static_cast<long long>(kStopGrace.count()));
      impl->ioc.stop();
    }
  }
  for (std::thread& t : impl->io_threads) t.join();
  impl->io_threads.clear();
}

Server::Stats Server::stats() const {
  const Impl::Counters& c = impl_->counters;
  Stats s;
  s.connections_open = c.connections_open;
  s.connections_total = c.connections_total;
  s.requests_total = c.requests_total;
  s.requests_queued = impl_->pool ? impl_->pool->queued() : 0;
  s.requests_running = impl_->pool ? impl_->pool->busy() : 0;
  s.rejected_busy = c.rejected_busy;
  s.rejected_connections = c.rejected_connections;
  s.rejected_auth = c.rejected_auth;
  s.rejected_malformed = c.rejected_malformed;
  s.timeouts = c.timeouts;
  s.streams_open = c.streams_open;
  s.streams_cancelled = c.streams_cancelled;
  return s;
}

}  // namespace braid::http
