// The server over loopback, with a raw-socket client written here (so the
// bytes on the wire are what is checked): routing, keys, limits, timeouts,
// keep-alive, streams and their cancellation, back-pressure.
#include "http/server.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace braid::http {
namespace {

using namespace std::chrono_literals;

// How long a wait for something that must happen may take before the test
// fails: only a bound on a hang, far beyond what a loaded machine needs.
constexpr std::chrono::milliseconds kHang = 60s;

// ---- a minimal HTTP/1.1 client ----

class Conn {
 public:
  explicit Conn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    // A server bug must fail the test, not hang it; a slow machine must not.
    timeval tv{std::chrono::duration_cast<std::chrono::seconds>(kHang).count(), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Conn() { CloseNow(); }
  bool connected() const { return connected_; }
  void CloseNow() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Shuts the sending side only (a half-close): the server reads the end of
  // the requests, and the answers can still arrive.
  void HalfClose() { ::shutdown(fd_, SHUT_WR); }

  void Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

  struct Reply {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-cased names
    std::string body;
  };

  // One response; nullopt when the connection ends first.
  std::optional<Reply> Read() {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return std::nullopt;
    }
    Reply r;
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string line = head.substr(pos, e - pos);
      size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[name] = value;
      pos = e + 2;
    }
    if (r.headers.count("transfer-encoding")) {
      while (true) {
        auto chunk = ReadChunk();
        if (!chunk) return std::nullopt;
        if (chunk->empty()) break;
        r.body += *chunk;
      }
    } else {
      size_t len = r.headers.count("content-length") ? std::stoul(r.headers["content-length"]) : 0;
      while (buf_.size() < len) {
        if (!Fill()) return std::nullopt;
      }
      r.body = buf_.substr(0, len);
      buf_.erase(0, len);
    }
    return r;
  }

  // The final response, after any interim (1xx) ones.
  std::optional<Reply> ReadFinal() {
    auto r = Read();
    while (r && r->status >= 100 && r->status < 200) r = Read();
    return r;
  }

  // One chunk's data of a chunked body ("" for the last chunk).
  std::optional<std::string> ReadChunk() {
    size_t e;
    while ((e = buf_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return std::nullopt;
    }
    size_t size = std::stoul(buf_.substr(0, e), nullptr, 16);
    buf_.erase(0, e + 2);
    while (buf_.size() < size + 2) {
      if (!Fill()) return std::nullopt;
    }
    std::string data = buf_.substr(0, size);
    buf_.erase(0, size + 2);
    return data;
  }

  // Reads the response's status line and headers only (for streams).
  std::optional<std::string> ReadHead() {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return std::nullopt;
    }
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    return head;
  }

  // Bytes received beyond what was parsed so far.
  std::string TakeBuffered() { return std::exchange(buf_, std::string()); }

  // True when the server closes the connection within `limit` (nothing
  // more arrives; `limit` only bounds a hang). Any bytes that do arrive are
  // appended to `got`.
  bool WaitClosed(std::chrono::milliseconds limit, std::string* got = nullptr) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return true;
      if (got) got->append(tmp, static_cast<size_t>(n));
    }
    return false;
  }

 private:
  bool Fill() {
    char tmp[4096];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

std::string Get(const std::string& target, const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

std::string Post(const std::string& target, const std::string& body,
                 const std::string& extra = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A router echoing what the session made of the request.
Router EchoRouter() {
  Router r;
  Handler echo = [](const Request& q, const Params&) {
    nlohmann::json j;
    j["method"] = q.method;
    j["target"] = q.target;
    j["path"] = q.path;
    j["query"] = q.query;
    j["headers"] = q.headers;
    j["body"] = q.body;
    j["client"] = q.client;
    j["peer"] = q.peer;
    return JsonResponse(200, j.dump());
  };
  r.Add("GET", "/echo/{x}", echo);
  r.Add("POST", "/echo/{x}", echo);
  r.Add("GET", "/health", [](const Request&, const Params&) { return JsonResponse(200, "{}"); });
  r.Add("GET", "/throw",
        [](const Request&, const Params&) -> Response { throw std::runtime_error("boom"); });
  return r;
}

ServerOptions TestOptions() {
  ServerOptions o;
  o.io_threads = 2;
  o.workers = 4;
  return o;
}

std::unique_ptr<Server> MustStart(const ServerOptions& o, const Router* r) {
  auto s = Server::Start(o, r);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  return std::move(s).value();
}

nlohmann::json ErrorOf(const Conn::Reply& r) { return nlohmann::json::parse(r.body)["error"]; }

TEST_CASE("server: routes, decodes the request, answers 404/405/500 in the error shape") {
  Router router = EchoRouter();
  auto server = MustStart(TestOptions(), &router);
  Conn c(server->port());
  REQUIRE(c.connected());
  c.Send(Post("/echo/a%20b?x=1&y=hello+w%C3%B6rld&flag", "{\"k\":1}", "X-Custom-Thing: V\r\n"));
  auto r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->headers["content-type"] == "application/json");
  auto j = nlohmann::json::parse(r->body);
  CHECK(j["method"] == "POST");
  CHECK(j["path"] == "/echo/a b");
  CHECK(j["target"] == "/echo/a%20b?x=1&y=hello+w%C3%B6rld&flag");
  CHECK(j["query"]["x"] == "1");
  CHECK(j["query"]["y"] == "hello w\xC3\xB6rld");
  CHECK(j["query"]["flag"] == "");
  CHECK(j["headers"]["x-custom-thing"] == "V");
  CHECK(j["body"] == "{\"k\":1}");
  CHECK(j["client"] == "");
  CHECK(j["peer"].get<std::string>().rfind("127.0.0.1:", 0) == 0);

  c.Send(Get("/nowhere"));
  r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 404);
  CHECK(ErrorOf(*r)["type"] == "not_found_error");
  c.Send("DELETE /echo/a HTTP/1.1\r\nHost: t\r\n\r\n");
  r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 405);
  CHECK(r->headers["allow"] == "GET, POST");
  c.Send(Get("/throw"));
  r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 500);
  CHECK(ErrorOf(*r)["type"] == "server_error");
  c.Send(Get("/echo/%zz"));  // bad percent-encoding: 400, and the connection ends
  r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 400);
  CHECK(c.WaitClosed(kHang));
}

TEST_CASE("server: API keys: 401 without or with a wrong key, client named with the right one") {
  Router router = EchoRouter();
  ServerOptions o = TestOptions();
  o.api_keys = {{"sk-alice-0123", "alice"}, {"sk-bob-456789", "bob"}};
  auto server = MustStart(o, &router);
  Conn c(server->port());
  c.Send(Get("/echo/1"));
  auto r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 401);
  CHECK(r->headers["www-authenticate"] == "Bearer");
  CHECK(ErrorOf(*r)["type"] == "authentication_error");
  c.Send(Get("/echo/1", "Authorization: Bearer sk-alice-0124\r\n"));
  r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 401);
  c.Send(Get("/echo/1", "Authorization: Bearer sk-alice-01234\r\n"));  // a longer key is not it
  r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 401);
  c.Send(Get("/echo/1", "Authorization: bearer sk-bob-456789\r\n"));
  r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(nlohmann::json::parse(r->body)["client"] == "bob");
  c.Send(Get("/health"));  // public
  r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(server->stats().rejected_auth == 3);
}

TEST_CASE("server: CORS headers and the preflight, answered without a key") {
  Router router = EchoRouter();
  ServerOptions o = TestOptions();
  o.api_keys = {{"sk-alice-0123", "alice"}};
  o.cors_origin = "https://app.example";
  auto server = MustStart(o, &router);
  Conn c(server->port());
  c.Send(
      "OPTIONS /echo/1 HTTP/1.1\r\nHost: t\r\nOrigin: https://app.example\r\n"
      "Access-Control-Request-Method: POST\r\n\r\n");
  auto r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 204);
  CHECK(r->headers["access-control-allow-origin"] == "https://app.example");
  CHECK(r->headers["access-control-allow-methods"].find("POST") != std::string::npos);
  CHECK(r->headers["access-control-allow-headers"].find("Authorization") != std::string::npos);
  c.Send(Get("/echo/1", "Authorization: Bearer sk-alice-0123\r\n"));
  r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->headers["access-control-allow-origin"] == "https://app.example");
}

TEST_CASE("server: 413 from the Content-Length alone, 431 for large headers") {
  Router router = EchoRouter();
  ServerOptions o = TestOptions();
  o.max_body_bytes = 1000;
  o.max_header_bytes = 2048;
  auto server = MustStart(o, &router);
  {
    Conn c(server->port());
    // Headers only: the answer must not wait for the body.
    c.Send("POST /echo/1 HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n");
    auto r = c.Read();
    REQUIRE(r);
    CHECK(r->status == 413);
    CHECK(ErrorOf(*r)["message"].get<std::string>().find("1000") != std::string::npos);
    CHECK(c.WaitClosed(kHang));
  }
  {
    Conn c(server->port());
    c.Send(Get("/echo/1", "X-Big: " + std::string(4000, 'a') + "\r\n"));
    auto r = c.Read();
    REQUIRE(r);
    CHECK(r->status == 431);
  }
  {
    Conn c(server->port());  // a body just under the limit is fine
    c.Send(Post("/echo/1", std::string(900, 'x')));
    auto r = c.Read();
    REQUIRE(r);
    CHECK(r->status == 200);
  }
}

TEST_CASE("server: Transfer-Encoding beside Content-Length, or not ending in chunked, is refused") {
  Router router = EchoRouter();
  auto server = MustStart(TestOptions(), &router);
  // Each is answered and the connection closed: what follows the header
  // cannot be told apart from the next request (request smuggling).
  auto refused = [&](const std::string& request) {
    Conn c(server->port());
    c.Send(request);
    auto r = c.Read();
    REQUIRE(r);
    CHECK(c.WaitClosed(kHang));
    return r->status;
  };
  CHECK(refused("POST /echo/1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n"
                "Content-Length: 5\r\n\r\nhello") == 400);
  CHECK(refused("POST /echo/1 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                "Transfer-Encoding: xchunked\r\n\r\nhello") == 400);
  CHECK(refused("POST /echo/1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                "Content-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n") == 400);
  CHECK(refused("POST /echo/1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n"
                "\r\n5\r\nhello\r\n0\r\n\r\n") == 400);
  CHECK(refused("POST /echo/1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n") == 400);
  CHECK(refused("POST /echo/1 HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                "\r\n5\r\nhello\r\n0\r\n\r\n") == 400);
  CHECK(refused("POST /echo/1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n"
                "\r\n5\r\nhello\r\n0\r\n\r\n") == 501);
  // The one accepted form: chunked alone (in any case).
  Conn c(server->port());
  c.Send(
      "POST /echo/1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n"
      "5\r\nhello\r\n0\r\n\r\n");
  auto r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(nlohmann::json::parse(r->body)["body"] == "hello");
}

TEST_CASE("server: the header limit holds for the whole header section, not each field") {
  Router router = EchoRouter();
  ServerOptions o = TestOptions();
  o.max_header_bytes = 16 << 10;
  auto server = MustStart(o, &router);
  // Many small fields: none is large, the section is. The session reads
  // them in several pieces, as a socket delivers them.
  auto fields = [](int n) {
    std::string f;
    for (int i = 0; i < n; ++i)
      f += "X-Field-" + std::to_string(i) + ": " + std::string(40, 'v') + "\r\n";
    return f;
  };
  {
    Conn c(server->port());
    // About 18 KB: Beast 1.74 alone let through what its first read took
    // (4 KB here) plus up to the limit more.
    const std::string request = Get("/echo/1", fields(330));
    REQUIRE(request.size() > (17u << 10));
    c.Send(request);
    auto r = c.Read();
    REQUIRE(r);
    CHECK(r->status == 431);
    CHECK(ErrorOf(*r)["message"].get<std::string>().find("16384") != std::string::npos);
    CHECK(c.WaitClosed(kHang));
  }
  {
    Conn c(server->port());
    const std::string request = Get("/echo/1", fields(250));  // about 14.5 KB
    REQUIRE(request.size() < (16u << 10));
    c.Send(request);
    auto r = c.Read();
    REQUIRE(r);
    CHECK(r->status == 200);
  }
}

TEST_CASE("server: a request that stalls is closed after read_timeout, unanswered") {
  Router router = EchoRouter();
  ServerOptions o = TestOptions();
  o.read_timeout_ms = 300;
  auto server = MustStart(o, &router);
  Conn c(server->port());
  c.Send("GET /echo/1 HTTP/1.1\r\nHost: t\r\n");  // and never the blank line
  std::string got;
  CHECK(c.WaitClosed(kHang, &got));
  CHECK(got.empty());
  // The socket is closed by the timer, the counter bumped when the read
  // then fails: a moment later.
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  while (server->stats().timeouts == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  CHECK(server->stats().timeouts == 1);
}

TEST_CASE("server: a kept-alive connection idle past idle_timeout is closed") {
  Router router = EchoRouter();
  ServerOptions o = TestOptions();
  o.idle_timeout_ms = 200;
  auto server = MustStart(o, &router);
  Conn c(server->port());
  c.Send(Get("/echo/1"));
  REQUIRE(c.Read());
  std::string got;
  CHECK(c.WaitClosed(kHang, &got));
  CHECK(got.empty());
}

TEST_CASE("server: keep-alive serves two requests on one connection") {
  Router router = EchoRouter();
  auto server = MustStart(TestOptions(), &router);
  Conn c(server->port());
  c.Send(Get("/echo/1"));
  auto a = c.Read();
  c.Send(Get("/echo/2"));
  auto b = c.Read();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(nlohmann::json::parse(a->body)["path"] == "/echo/1");
  CHECK(nlohmann::json::parse(b->body)["path"] == "/echo/2");
  CHECK(server->stats().connections_total == 1);
  CHECK(server->stats().requests_total == 2);
  // "Connection: close" is honoured: the server ends the connection.
  c.Send(Get("/echo/3", "Connection: close\r\n"));
  auto last = c.Read();
  REQUIRE(last);
  CHECK(last->headers["connection"] == "close");
  CHECK(c.WaitClosed(kHang));
}

TEST_CASE("server: Expect: 100-continue and chunked request bodies") {
  Router router = EchoRouter();
  auto server = MustStart(TestOptions(), &router);
  Conn c(server->port());
  c.Send("POST /echo/1 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  auto go = c.Read();  // the client may send the body now
  REQUIRE(go);
  CHECK(go->status == 100);
  c.Send("hello");
  auto r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(nlohmann::json::parse(r->body)["body"] == "hello");
  c.Send(
      "POST /echo/2 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  r = c.Read();
  REQUIRE(r);
  CHECK(nlohmann::json::parse(r->body)["body"] == "abcde");
}

// Signals between a test and a stream's producer.
struct Flag {
  std::mutex mu;
  std::condition_variable cv;
  bool set = false;
  void Set() {
    {
      std::lock_guard<std::mutex> lock(mu);
      set = true;
    }
    cv.notify_all();
  }
  bool Wait(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, limit, [this] { return set; });
  }
};

TEST_CASE("server: a streamed answer arrives chunked, in order and whole; keep-alive after") {
  Router router = EchoRouter();
  std::vector<std::thread> producers;
  router.Add("GET", "/stream", [&](const Request&, const Params&) {
    Response res;
    res.content_type = "text/event-stream";
    res.stream = std::make_shared<EventStream>();
    producers.emplace_back([s = res.stream] {
      for (int i = 0; i < 200; ++i) s->Send(SseEvent("event " + std::to_string(i)));
      s->Close();
    });
    return res;
  });
  ServerOptions o = TestOptions();
  o.workers = 1;  // `producers` is touched by one handler thread at a time
  auto server = MustStart(o, &router);
  Conn c(server->port());
  c.Send(Get("/stream"));
  auto r = c.Read();
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->headers["transfer-encoding"] == "chunked");
  CHECK(r->headers["content-type"] == "text/event-stream");
  CHECK(r->headers["cache-control"] == "no-cache");
  CHECK(r->headers["x-accel-buffering"] == "no");
  CHECK(r->headers.count("content-length") == 0);
  std::string expected;
  for (int i = 0; i < 200; ++i) expected += SseEvent("event " + std::to_string(i));
  CHECK(r->body == expected);
  c.Send(Get("/echo/after"));
  auto after = c.Read();
  REQUIRE(after);
  CHECK(nlohmann::json::parse(after->body)["path"] == "/echo/after");
  // HTTP/1.0 has no chunks: the same body, ended by the close.
  Conn old(server->port());
  old.Send("GET /stream HTTP/1.0\r\n\r\n");
  auto head = old.ReadHead();
  REQUIRE(head);
  CHECK(head->find("Transfer-Encoding") == std::string::npos);
  std::string body = old.TakeBuffered();
  CHECK(old.WaitClosed(kHang, &body));
  CHECK(body == expected);
  for (auto& t : producers) t.join();
  CHECK(server->stats().streams_open == 0);
}

TEST_CASE("server: a client leaving mid-stream cancels the stream; so does Stop") {
  Router router;
  Flag cancelled;
  std::mutex held_mu;  // the handler's thread sets it, the test reads it
  std::shared_ptr<EventStream> held;
  auto holding = [&] {
    std::lock_guard<std::mutex> lock(held_mu);
    return held;
  };
  router.Add("GET", "/stream", [&](const Request&, const Params&) {
    Response res;
    res.content_type = "text/event-stream";
    res.stream = std::make_shared<EventStream>();
    res.stream->OnCancel([&] { cancelled.Set(); });
    res.stream->Send(SseEvent("first"));
    std::lock_guard<std::mutex> lock(held_mu);
    held = res.stream;  // the producer keeps it open and says nothing more
    return res;
  });
  ServerOptions o = TestOptions();
  o.workers = 1;
  auto server = MustStart(o, &router);
  {
    Conn c(server->port());
    c.Send(Get("/stream"));
    REQUIRE(c.ReadHead());
    auto first = c.ReadChunk();
    REQUIRE(first);
    CHECK(*first == SseEvent("first"));
    c.CloseNow();
    CHECK(cancelled.Wait(kHang));  // the session reads while streaming, so it notices
    CHECK_FALSE(holding()->Send("late"));
  }
  {
    std::lock_guard<std::mutex> lock(cancelled.mu);
    cancelled.set = false;
  }
  {
    std::lock_guard<std::mutex> lock(held_mu);
    held.reset();
  }
  Conn c(server->port());
  c.Send(Get("/stream"));
  REQUIRE(c.ReadHead());
  REQUIRE(c.ReadChunk());
  server->Stop();
  CHECK(cancelled.Wait(kHang));
  CHECK(holding()->cancelled());
  server->Stop();  // idempotent
}

TEST_CASE("server: a client leaving while its handler runs signals ClientGone; others answer") {
  Router router;
  Flag entered, gone;
  router.Add("GET", "/slow", [&](const Request& r, const Params&) {
    // Waits for the client to leave (as a handler waiting on an engine
    // would), then answers into the void.
    r.client_gone->OnGone([&] { gone.Set(); });
    entered.Set();
    gone.Wait(kHang);
    return JsonResponse(200, "{}");
  });
  router.Add("GET", "/quick", [](const Request& r, const Params&) {
    return JsonResponse(200, r.client_gone && !r.client_gone->gone() ? "{\"ok\":1}" : "{}");
  });
  auto server = MustStart(TestOptions(), &router);
  {
    Conn c(server->port());
    c.Send(Get("/slow"));
    REQUIRE(entered.Wait(kHang));  // the handler runs, watching for the client
    c.CloseNow();
    CHECK(gone.Wait(kHang));  // the session reads while the handler runs, so it notices
  }
  // A handler that answers normally: the watch read ends, keep-alive goes on.
  Conn c(server->port());
  for (int i = 0; i < 2; ++i) {
    c.Send(Get("/quick"));
    auto reply = c.Read();
    REQUIRE(reply);
    CHECK(reply->body.find("ok") != std::string::npos);
  }
}

TEST_CASE("server: StopAccepting refuses new connections; Stop signals a running handler") {
  Router router;
  Flag entered, gone;
  router.Add("GET", "/slow", [&](const Request& r, const Params&) {
    r.client_gone->OnGone([&] { gone.Set(); });
    entered.Set();
    gone.Wait(kHang);  // as a handler waiting for the engine would
    return JsonResponse(200, "{}");
  });
  router.Add("GET", "/quick",
             [](const Request&, const Params&) { return JsonResponse(200, "{}"); });
  auto server = MustStart(TestOptions(), &router);
  Conn c(server->port());
  c.Send(Get("/slow"));
  REQUIRE(entered.Wait(kHang));
  CHECK(server->stats().requests_running == 1);
  server->StopAccepting();
  // A connection made from now on is refused (or closed unanswered).
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  bool refused = false;
  while (!refused && std::chrono::steady_clock::now() < deadline) {
    Conn late(server->port());
    late.Send(Get("/quick"));
    refused = !late.Read();
    if (!refused) std::this_thread::sleep_for(10ms);
  }
  CHECK(refused);
  CHECK_FALSE(gone.Wait(std::chrono::milliseconds(50)));  // the open one goes on
  // Stop closes the connection: its running handler hears the client is gone.
  server->Stop();
  CHECK(gone.Wait(kHang));
  CHECK(server->stats().requests_running == 0);
}

TEST_CASE("server: a client that half-closes after its request still gets the answer") {
  Router router = EchoRouter();
  Flag entered, release;
  router.Add("GET", "/slow", [&](const Request& r, const Params&) {
    entered.Set();
    release.Wait(kHang);
    return JsonResponse(200, r.client_gone && r.client_gone->gone() ? "{\"gone\":1}" : "{}");
  });
  std::shared_ptr<EventStream> held;
  std::mutex held_mu;
  router.Add("GET", "/stream", [&](const Request&, const Params&) {
    Response res;
    res.content_type = "text/event-stream";
    res.stream = std::make_shared<EventStream>();
    std::lock_guard<std::mutex> lock(held_mu);
    held = res.stream;  // the test writes the events
    return res;
  });
  auto server = MustStart(TestOptions(), &router);
  {
    // The end of the requests arrives with the request: answered, then closed.
    Conn c(server->port());
    c.Send(Get("/echo/1"));
    c.HalfClose();
    auto r = c.ReadFinal();
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(nlohmann::json::parse(r->body)["path"] == "/echo/1");
    CHECK(r->headers["connection"] == "close");
    CHECK(c.WaitClosed(kHang));
  }
  {
    // ... or while the handler runs: it is not told the client left.
    Conn c(server->port());
    c.Send(Get("/slow"));
    REQUIRE(entered.Wait(kHang));
    c.HalfClose();
    std::this_thread::sleep_for(50ms);  // lets the end reach the session first (not required)
    release.Set();
    auto r = c.ReadFinal();
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->body == "{}");
    CHECK(c.WaitClosed(kHang));
  }
  {
    // ... or while a stream is open: the stream goes on to its end.
    Conn c(server->port());
    c.Send(Get("/stream"));
    REQUIRE(c.ReadHead());
    c.HalfClose();
    std::this_thread::sleep_for(50ms);  // as above
    std::shared_ptr<EventStream> s;
    {
      std::lock_guard<std::mutex> lock(held_mu);
      s = held;
    }
    REQUIRE(s);
    CHECK(s->Send(SseEvent("one")));
    CHECK(s->Send(SseEvent("two")));
    s->Close();
    std::string body;
    while (auto chunk = c.ReadChunk()) {
      if (chunk->empty()) break;
      body += *chunk;
    }
    // A comment line (":") may come between the events; without it they
    // arrive whole and in order.
    std::string events;
    for (size_t pos = 0; pos < body.size();) {
      size_t end = std::min(body.find('\n', pos), body.size() - 1) + 1;
      if (body.compare(pos, end - pos, ":\n") != 0) events += body.substr(pos, end - pos);
      pos = end;
    }
    CHECK(events == SseEvent("one") + SseEvent("two"));
    CHECK_FALSE(s->cancelled());
    CHECK(c.WaitClosed(kHang));
  }
}

TEST_CASE("server: saturated workers answer 429 with Retry-After") {
  Router router = EchoRouter();
  Flag entered, release;
  router.Add("GET", "/block", [&](const Request&, const Params&) {
    entered.Set();
    release.Wait(kHang);
    return JsonResponse(200, "{}");
  });
  ServerOptions o = TestOptions();
  o.workers = 1;
  o.max_pending = 1;
  auto server = MustStart(o, &router);
  Conn a(server->port()), b(server->port()), c(server->port());
  a.Send(Get("/block"));
  REQUIRE(entered.Wait(kHang));  // the only worker is busy
  b.Send(Get("/block"));
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  while (server->stats().requests_queued < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(server->stats().requests_queued == 1);  // the queue is full
  c.Send(Get("/block"));
  auto busy = c.Read();
  REQUIRE(busy);
  CHECK(busy->status == 429);
  CHECK(busy->headers["retry-after"] == "1");
  CHECK(ErrorOf(*busy)["type"] == "rate_limit_error");
  // The liveness probe runs on the I/O thread: answered while saturated.
  Conn d(server->port());
  d.Send(Get("/health"));
  auto health = d.Read();
  REQUIRE(health);
  CHECK(health->status == 200);
  release.Set();
  auto ra = a.Read();
  auto rb = b.Read();
  REQUIRE(ra);
  REQUIRE(rb);
  CHECK(ra->status == 200);
  CHECK(rb->status == 200);
  CHECK(server->stats().rejected_busy == 1);
}

TEST_CASE("server: connections past max_connections get 503") {
  Router router = EchoRouter();
  ServerOptions o = TestOptions();
  o.max_connections = 1;
  auto server = MustStart(o, &router);
  Conn a(server->port());
  a.Send(Get("/echo/1"));
  REQUIRE(a.Read());  // a's session exists now
  Conn b(server->port());
  b.Send(Get("/echo/2"));
  auto r = b.Read();
  REQUIRE(r);
  CHECK(r->status == 503);
  CHECK(server->stats().rejected_connections == 1);
}

TEST_CASE("server: binding a taken port names the address") {
  Router router;
  auto first = MustStart(TestOptions(), &router);
  ServerOptions o = TestOptions();
  o.port = first->port();
  auto second = Server::Start(o, &router);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == StatusCode::kIoError);
  CHECK(second.status().message().find("127.0.0.1:" + std::to_string(o.port)) != std::string::npos);
  o.host = "not-an-address";
  CHECK(Server::Start(o, &router).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::http
