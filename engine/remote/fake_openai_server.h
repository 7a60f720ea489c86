// Tests only: a small OpenAI-compatible server on 127.0.0.1 made of POSIX
// sockets. Each POST /v1/completions takes the next scripted reply (a
// streamed answer, an error status, a dropped connection or a stall); GET
// /health answers health_status (200). Every request is recorded.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace braid::remote::testing {

class FakeOpenAiServer {
 public:
  struct Reply {
    enum class Kind { kStream, kStatus, kDrop } kind = Kind::kStream;
    std::vector<std::string> events;  // kStream: each event's data, one chunk each
    // kStream: after this many events, stop sending and keep the connection
    // open until the client closes it (-1: send all and finish).
    int stall_after = -1;
    // kStream: after this many events, close the connection mid-stream.
    int drop_after = -1;
    int status = 503;  // kStatus
    std::string body = R"({"error": {"message": "busy"}})";
  };
  struct Request {
    std::string method, target, headers, body;
  };

  // Listens on `port` (0: any free one).
  explicit FakeOpenAiServer(uint16_t port = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 16) == 0;
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Accept(); });
  }
  ~FakeOpenAiServer() {
    stop_ = true;
    thread_.join();
    for (auto& t : conns_) t.join();
    ::close(fd_);
  }

  bool ok() const { return ok_; }
  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void Push(Reply r) {
    std::lock_guard<std::mutex> lock(mu_);
    replies_.push_back(std::move(r));
  }
  std::vector<Request> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  int completions() const {
    int n = 0;
    for (const auto& r : requests()) n += r.target.ends_with("/v1/completions");
    return n;
  }
  // The status GET /health answers with.
  std::atomic<int> health_status{200};
  // A stalled connection saw the client close it.
  bool saw_client_close() const { return client_closed_; }

  // The usual answer: "Hel", "lo", "!" then usage and [DONE].
  static Reply Hello() {
    Reply r;
    r.events = {R"({"choices":[{"index":0,"text":"Hel","finish_reason":null}]})",
                R"({"choices":[{"index":0,"text":"lo","finish_reason":null}]})",
                R"({"choices":[{"index":0,"text":"!","finish_reason":"stop"}]})",
                R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,)"
                R"("prompt_tokens_details":{"cached_tokens":2}}})",
                "[DONE]"};
    return r;
  }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      conns_.emplace_back([this, c] {
        Serve(c);
        ::close(c);
      });
    }
  }

  // Waits up to 20 ms for bytes; 0 on close, -1 on nothing yet.
  int Recv(int c, char* buf, size_t n) {
    pollfd p{c, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) return -1;
    const ssize_t got = ::recv(c, buf, n, 0);
    return got <= 0 ? 0 : static_cast<int>(got);
  }
  void Send(int c, const std::string& s) { ::send(c, s.data(), s.size(), MSG_NOSIGNAL); }

  void Serve(int c) {
    std::string in;
    char buf[4096];
    size_t header_end = std::string::npos;
    while (!stop_ && header_end == std::string::npos) {
      const int n = Recv(c, buf, sizeof buf);
      if (n == 0) return;
      if (n > 0) in.append(buf, static_cast<size_t>(n));
      header_end = in.find("\r\n\r\n");
    }
    if (header_end == std::string::npos) return;
    Request req;
    req.headers = in.substr(0, header_end);
    const size_t sp1 = in.find(' '), sp2 = in.find(' ', sp1 + 1);
    req.method = in.substr(0, sp1);
    req.target = in.substr(sp1 + 1, sp2 - sp1 - 1);
    size_t length = 0;
    for (const char* name : {"Content-Length: ", "content-length: "})
      if (size_t at = req.headers.find(name); at != std::string::npos)
        length = std::stoul(req.headers.substr(at + std::strlen(name)));
    while (!stop_ && in.size() < header_end + 4 + length) {
      const int n = Recv(c, buf, sizeof buf);
      if (n == 0) return;
      if (n > 0) in.append(buf, static_cast<size_t>(n));
    }
    req.body = in.substr(header_end + 4, length);
    Reply reply = Hello();
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
      if (req.target.ends_with("/health")) {
        Send(c, "HTTP/1.1 " + std::to_string(health_status.load()) +
                    " Health\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        return;
      }
      if (!replies_.empty()) {
        reply = std::move(replies_.front());
        replies_.pop_front();
      }
    }
    switch (reply.kind) {
      case Reply::Kind::kDrop:
        return;
      case Reply::Kind::kStatus:
        Send(c, "HTTP/1.1 " + std::to_string(reply.status) +
                    " Error\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(reply.body.size()) + "\r\nConnection: close\r\n\r\n" +
                    reply.body);
        return;
      case Reply::Kind::kStream:
        break;
    }
    Send(c,
         "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: "
         "chunked\r\nConnection: close\r\n\r\n");
    for (size_t i = 0; i < reply.events.size(); ++i) {
      if (static_cast<int>(i) == reply.drop_after) return;
      if (static_cast<int>(i) == reply.stall_after) {
        while (!stop_) {
          const int n = Recv(c, buf, sizeof buf);
          if (n == 0) {
            client_closed_ = true;
            return;
          }
        }
        return;
      }
      const std::string event = "data: " + reply.events[i] + "\n\n";
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", event.size());
      Send(c, size + event + "\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    Send(c, "0\r\n\r\n");
  }

  int fd_ = -1;
  bool ok_ = false;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false}, client_closed_{false};
  mutable std::mutex mu_;
  std::deque<Reply> replies_;
  std::vector<Request> requests_;
  std::thread thread_;
  std::vector<std::thread> conns_;  // the accept thread's only
};

}  // namespace braid::remote::testing
