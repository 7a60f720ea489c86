// The parts of the server without sockets: the API key file and its
// matching, the request parsing the sessions and the fuzz target share, and
// the worker pool's bound.
#include "http/request_parse.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "http/server.h"
#include "http/worker_pool.h"

namespace braid::http {
namespace {

// ---- the key file ----

std::string WriteTemp(const std::string& text) {
  static int n = 0;
  std::string path = "/tmp/braid_keys_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("ReadApiKeys: names, anonymous keys, comments; errors name file and line") {
  std::string path =
      WriteTemp("# keys\n\nalice  sk-alice-0123\n\tsk-anon-99999\nbob\tsk-bob-456789\n");
  auto keys = ReadApiKeys(path);
  REQUIRE_MESSAGE(keys.ok(), keys.status().ToString());
  CHECK(keys->keys.size() == 3);
  CHECK(keys->keys.at("sk-alice-0123") == "alice");
  CHECK(keys->keys.at("sk-anon-99999") == "key4");
  CHECK(keys->keys.at("sk-bob-456789") == "bob");
  CHECK(keys->weights.empty());
  std::remove(path.c_str());

  // Shares of fair sharing: one weight per name, given on any of its keys.
  path = WriteTemp(
      "alice sk-alice-0123 weight=2\nalice sk-alice-0456\nbob sk-bob-456789 weight=0.5\n");
  keys = ReadApiKeys(path);
  REQUIRE_MESSAGE(keys.ok(), keys.status().ToString());
  CHECK(keys->keys.size() == 3);
  CHECK(keys->weights == std::map<std::string, double>{{"alice", 2.0}, {"bob", 0.5}});
  std::remove(path.c_str());

  auto error = [](const std::string& text) {
    std::string p = WriteTemp(text);
    auto r = ReadApiKeys(p);
    std::remove(p.c_str());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find(p) != std::string::npos);
    return r.status().message();
  };
  CHECK(error("a sk-aaaaaaaa\nb sk-aaaaaaaa\n").find(":2:") != std::string::npos);
  CHECK(error("# c\nshort\n").find(":2: key shorter") != std::string::npos);
  CHECK(error("al/ice sk-aaaaaaaa\n").find(":1: name") != std::string::npos);
  CHECK(error("a b sk-aaaaaaaa\n").find(":1:") != std::string::npos);
  CHECK(error("# nothing\n").find("no API key") != std::string::npos);
  CHECK(error("a sk-aaaaaaaa weight=0\n").find(":1: weight must be") != std::string::npos);
  CHECK(error("a sk-aaaaaaaa weight=x\n").find("got \"x\"") != std::string::npos);
  CHECK(error("a sk-aaaaaaaa w=2\n").find(":1: expected") != std::string::npos);
  CHECK(error("a sk-aaaaaaaa weight=2\na sk-bbbbbbbb weight=3\n").find(":2: client \"a\"") !=
        std::string::npos);
  CHECK(error("a b sk-aaaaaaaa weight=2\n").find(":1:") != std::string::npos);
  auto missing = ReadApiKeys("/nonexistent/keys.txt");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kIoError);
  CHECK(missing.status().message().find("/nonexistent/keys.txt") != std::string::npos);
}

TEST_CASE("MatchApiKey: exact keys only") {
  std::map<std::string, std::string> keys{{"sk-aaaaaaaa", "a"}, {"sk-bbbbbbbb", "b"}};
  CHECK(MatchApiKey(keys, "sk-bbbbbbbb") == std::optional<std::string>("b"));
  CHECK_FALSE(MatchApiKey(keys, "sk-bbbbbbb"));
  CHECK_FALSE(MatchApiKey(keys, "sk-bbbbbbbbb"));
  CHECK_FALSE(MatchApiKey(keys, ""));
  CHECK_FALSE(MatchApiKey({}, "sk-aaaaaaaa"));
}

// ---- the session's parsing, without sockets ----

TEST_CASE("ParseRequestBytes: targets, chunked bodies, limits as HTTP statuses") {
  ServerOptions o;
  o.max_body_bytes = 64;
  auto get = ParseRequestBytes(
      "GET /a%2Fb/c?q=%41+b&q=last HTTP/1.1\r\nHost: h\r\n"
      "Accept: x\r\naccept: y\r\n\r\n",
      o);
  REQUIRE_MESSAGE(get.ok(), get.status().ToString());
  CHECK(get->path == "/a/b/c");
  CHECK(get->query.at("q") == "last");
  CHECK(get->headers.at("accept") == "x, y");
  auto chunked = ParseRequestBytes(
      "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
      "\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
      o);
  REQUIRE_MESSAGE(chunked.ok(), chunked.status().ToString());
  CHECK(chunked->body == "hello world");
  auto big = ParseRequestBytes("POST /p HTTP/1.1\r\nContent-Length: 65\r\n\r\n", o);
  CHECK(HttpStatusForParseError(big.status()) == 413);
  auto partial = ParseRequestBytes("GET / HTTP/1.1\r\nHost", o);
  CHECK(HttpStatusForParseError(partial.status()) == 400);
  CHECK(HttpStatusForParseError(ParseRequestBytes("GET /%4 HTTP/1.1\r\n\r\n", o).status()) == 400);
  CHECK(HttpStatusForParseError(ParseRequestBytes("GET http://x/ HTTP/1.1\r\n\r\n", o).status()) ==
        400);
  CHECK_FALSE(ParseRequestBytes("GET /a%00b HTTP/1.1\r\n\r\n", o).ok());
  CHECK_FALSE(PercentDecode("%", false).ok());
  CHECK(PercentDecode("a+b%2b", false).value() == "a+b+");
  CHECK(PercentDecode("a+b%2b", true).value() == "a b+");
}

TEST_CASE("ParseRequestBytes: Transfer-Encoding only alone and ending in chunked") {
  ServerOptions o;
  auto status = [&](const std::string& head) {
    auto r = ParseRequestBytes(
        "POST /p HTTP/1.1\r\nHost: h\r\n" + head + "\r\n5\r\nhello\r\n0\r\n\r\n", o);
    return r.ok() ? 200 : HttpStatusForParseError(r.status());
  };
  CHECK(status("Transfer-Encoding: chunked\r\n") == 200);
  CHECK(status("Transfer-Encoding: CHUNKED \r\n") == 200);
  CHECK(status("Transfer-Encoding: xchunked\r\nContent-Length: 5\r\n") == 400);
  CHECK(status("Content-Length: 5\r\nTransfer-Encoding: xchunked\r\n") == 400);
  CHECK(status("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") == 400);
  CHECK(status("Transfer-Encoding: xchunked\r\n") == 400);
  CHECK(status("Transfer-Encoding: chunked, identity\r\n") == 400);
  CHECK(status("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n") == 400);
  CHECK(status("Transfer-Encoding: ,\r\n") == 400);
  CHECK(status("Transfer-Encoding: gzip, chunked\r\n") == 501);
  CHECK(status("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n") == 501);
  auto old = ParseRequestBytes(
      "POST /p HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", o);
  CHECK(HttpStatusForParseError(old.status()) == 400);
}

TEST_CASE("PutHeaderBytes: the limit holds for the header section however reads split it") {
  ServerOptions o;
  o.max_header_bytes = 4096;
  // Feeds `request` in pieces of `step` bytes as a session does: what the
  // parser leaves unconsumed stays in front of the next piece.
  auto read = [&](const std::string& request, size_t step) {
    RequestParser parser;
    parser.header_limit(static_cast<std::uint32_t>(o.max_header_bytes));
    std::string buffered;
    size_t sent = 0, header_bytes = 0;
    boost::beast::error_code ec;
    while (!parser.is_header_done() && sent < request.size()) {
      buffered += request.substr(sent, step);
      sent += step;
      size_t n = PutHeaderBytes(parser, buffered, o, &header_bytes, ec);
      buffered.erase(0, n);
      if (ec && ec != boost::beast::http::error::need_more) break;
    }
    return parser.is_header_done() ? Status::Ok() : ParseErrorStatus(ec, o);
  };
  auto fields = [](int n) {
    std::string f;
    for (int i = 0; i < n; ++i)
      f += "X-F" + std::to_string(i) + ": " + std::string(20, 'v') + "\r\n";
    return f;
  };
  const std::string small = "GET / HTTP/1.1\r\n" + fields(100) + "\r\n";  // about 2.8 KB
  const std::string large = "GET / HTTP/1.1\r\n" + fields(200) + "\r\n";  // about 5.8 KB
  REQUIRE(small.size() < o.max_header_bytes);
  REQUIRE(large.size() > o.max_header_bytes);
  for (size_t step : {size_t{1} << 20, size_t{1000}, size_t{100}, size_t{7}}) {
    CAPTURE(step);
    CHECK(read(small, step).ok());
    Status s = read(large, step);
    CHECK(HttpStatusForParseError(s) == 431);
    CHECK(s.message().find("4096") != std::string::npos);
  }
}

TEST_CASE("WorkerPool: idle threads take tasks, max_pending more wait, the rest are refused") {
  WorkerPool pool(1, 0);
  std::atomic<bool> started{false}, release{false};
  std::function<void()> block = [&] {
    started = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  REQUIRE(pool.TrySubmit(block));
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<int> ran{0};
  std::function<void()> count = [&] { ++ran; };
  CHECK_FALSE(pool.TrySubmit(count));  // the only thread is busy and nothing may wait
  CHECK(count);                        // a refused task is left to the caller
  release = true;
  // Once the thread is free again it takes the task (the minute is only a
  // bound on a hang).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool accepted = false;
  while (!accepted && std::chrono::steady_clock::now() < deadline) {
    accepted = pool.TrySubmit(count);
    if (!accepted) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(accepted);
  while (ran == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(ran == 1);
  pool.Stop();
  std::function<void()> late = [] {};
  CHECK_FALSE(pool.TrySubmit(late));  // stopped
}

}  // namespace
}  // namespace braid::http
