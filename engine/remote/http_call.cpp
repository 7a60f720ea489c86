// HttpCall on Asio and Beast: each step (connect, write, read the headers,
// read some of the body) is an asynchronous operation on a private
// io_context, run to completion under the stream's deadline, so one thread
// blocks per call while Abort can still interrupt it from another thread
// (by posting a close into that io_context).
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <chrono>
#include <limits>

#include "engine/http_client.h"

namespace braid::remote {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kErrorBodyBytes = 4096;

bool IsHttpParseError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_version).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message;
}

}  // namespace

struct HttpCall::Impl {
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  std::atomic<bool> aborted{false};

  // Starts one asynchronous operation and runs the io_context until it
  // completed or the deadline closed the stream.
  template <typename Start>
  beast::error_code Step(SteadyClock::time_point deadline, Start&& start) {
    beast::error_code result = asio::error::would_block;
    stream.expires_at(deadline);
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }

  HttpOutcome Fail(HttpFailure failure, const beast::error_code& ec, const char* step) {
    HttpOutcome o;
    o.failure = aborted.load() ? HttpFailure::kCancelled : failure;
    if (ec == beast::error::timeout && o.failure != HttpFailure::kCancelled)
      o.error = std::string("timed out ") + step;
    else
      o.error = std::string(step) + ": " + ec.message();
    if (o.failure == HttpFailure::kCancelled) o.error = "cancelled";
    return o;
  }

  // A failure after the connection was made: a parse error is a protocol
  // failure, a deadline a timeout, anything else a closed connection.
  HttpOutcome FailConnected(const beast::error_code& ec, const char* step) {
    HttpOutcome o = ec == beast::error::timeout ? Fail(HttpFailure::kTimeout, ec, step)
                    : IsHttpParseError(ec)      ? Fail(HttpFailure::kProtocol, ec, step)
                                                : Fail(HttpFailure::kClosed, ec, step);
    o.connected = true;
    return o;
  }
};

Result<HttpUrl> ParseHttpUrl(const std::string& url) {
  const std::string where = "remote engine url '" + url + "'";
  if (url.starts_with("https://"))
    return Status::Unsupported(where + ": https is not supported; give an http:// url");
  if (!url.starts_with("http://"))
    return Status::InvalidArgument(where + ": must start with http://");
  std::string rest = url.substr(7);
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  if (hostport.find('@') != std::string::npos || path.find_first_of("?#") != std::string::npos)
    return Status::InvalidArgument(where + ": give only scheme, host, port and path");
  HttpUrl u;
  size_t colon = hostport.rfind(':');
  if (hostport.starts_with("[")) {  // an IPv6 literal: [::1]:8080
    const size_t close = hostport.find(']');
    if (close == std::string::npos) return Status::InvalidArgument(where + ": unclosed '['");
    u.host = hostport.substr(1, close - 1);
    colon =
        close + 1 < hostport.size() && hostport[close + 1] == ':' ? close + 1 : std::string::npos;
    if (colon == std::string::npos && close + 1 != hostport.size())
      return Status::InvalidArgument(where + ": unexpected text after ']'");
  } else {
    u.host = hostport.substr(0, colon);
  }
  if (colon != std::string::npos) {
    const std::string port = hostport.substr(colon + 1);
    int p = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535)
      return Status::InvalidArgument(where + ": bad port '" + port + "'");
    u.port = static_cast<uint16_t>(p);
  }
  if (u.host.empty()) return Status::InvalidArgument(where + ": no host");
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.ends_with("/v1")) path.resize(path.size() - 3);  // OpenAI clients' base URL form
  u.base_path = path;
  return u;
}

HttpCall::HttpCall() : impl_(std::make_unique<Impl>()) {}
HttpCall::~HttpCall() = default;

void HttpCall::Abort() {
  impl_->aborted = true;
  Impl* im = impl_.get();
  asio::post(im->ioc, [im] { im->stream.close(); });
}

HttpOutcome HttpCall::Run(const HttpUrl& url, const HttpRequestSpec& spec,
                          const std::function<int(std::string_view)>& on_body) {
  Impl& im = *impl_;
  auto ms = [](int n) { return std::chrono::milliseconds(n); };
  if (im.aborted) return im.Fail(HttpFailure::kCancelled, {}, "before start");

  beast::error_code ec;
  tcp::resolver resolver(im.ioc);
  auto endpoints = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec) return im.Fail(HttpFailure::kConnect, ec, "resolving the host");
  ec = im.Step(SteadyClock::now() + ms(spec.connect_timeout_ms),
               [&](auto handler) { im.stream.async_connect(endpoints, std::move(handler)); });
  if (ec) return im.Fail(HttpFailure::kConnect, ec, "connecting");
  if (im.aborted) return im.FailConnected(ec, "connecting");

  http::request<http::string_body> req;
  req.method(http::string_to_verb(spec.method));
  req.target(spec.target);
  req.version(11);
  req.set(http::field::host, url.host + ":" + std::to_string(url.port));
  req.set(http::field::user_agent, "braid");
  for (const auto& [name, value] : spec.headers) req.set(name, value);
  if (!spec.body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = spec.body;
  }
  req.keep_alive(false);
  req.prepare_payload();
  SteadyClock::time_point deadline = SteadyClock::now() + ms(spec.first_timeout_ms);
  ec = im.Step(deadline,
               [&](auto handler) { http::async_write(im.stream, req, std::move(handler)); });
  if (ec) return im.FailConnected(ec, "sending the request");

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  // No limit (a stream lasts as long as the generation). Not boost::none:
  // Boost 1.74 compares a Content-Length against an empty limit as exceeded.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  ec = im.Step(deadline, [&](auto handler) {
    http::async_read_header(im.stream, buffer, parser, std::move(handler));
  });
  if (ec) return im.FailConnected(ec, "waiting for the response");

  HttpOutcome out;
  out.connected = true;
  out.status = static_cast<int>(parser.get().result_int());
  const bool success = out.status / 100 == 2;
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    ec = im.Step(deadline, [&](auto handler) {
      http::async_read_some(im.stream, buffer, parser, std::move(handler));
    });
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = sizeof chunk - parser.get().body().size;
    if (n > 0 && success) {
      const int next_ms = on_body(std::string_view(chunk, n));
      if (next_ms <= 0) {
        im.stream.close();
        HttpOutcome stopped = im.Fail(HttpFailure::kCancelled, {}, "stopped");
        stopped.connected = true;
        stopped.status = out.status;
        return stopped;
      }
      deadline = SteadyClock::now() + ms(next_ms);
    } else if (n > 0 && out.error_body.size() < kErrorBodyBytes) {
      out.error_body.append(chunk, std::min(n, kErrorBodyBytes - out.error_body.size()));
    }
    if (ec) {
      HttpOutcome failed = im.FailConnected(ec, "reading the response");
      failed.status = out.status;
      failed.error_body = std::move(out.error_body);
      return failed;
    }
  }
  beast::error_code ignored;
  im.stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return out;
}

}  // namespace braid::remote
