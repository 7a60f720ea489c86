// One connection's life: read a request (within read_timeout, with the body
// and header limits), admit it, run its handler on the worker pool, write
// the answer whole or as chunks of its stream, then wait for the next
// request (keep-alive, idle_timeout). Every handler runs on the
// connection's strand; the worker pool and stream producers come back to it
// by posting.
#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <exception>

#include "http/request_parse.h"
#include "http/server_impl.h"

namespace braid::http {

namespace {

using Millis = std::chrono::milliseconds;

// Read-ahead while a stream is written: past this many unread bytes (a
// client pipelining requests behind a stream) the session stops reading
// instead of buffering without bound, and notices a disconnect at the
// next write.
constexpr size_t kWatchBufferCap = 64 << 10;

// A stream's framed chunks go out in pieces of at most this many bytes, each
// with its own write timeout (as a whole answer goes out in what the socket
// takes at a time): a large result times out when its client stops
// reading, not because it is large.
constexpr size_t kWriteSlice = 1 << 20;

// The interim answer to "Expect: 100-continue", also written to learn
// whether a client that half-closed is still there (PeerDone).
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// Bytes that may go between a stream's chunks without changing what the
// body means, written to learn whether a client that half-closed is still
// there (PeerDone): an SSE comment line, or whitespace beside a JSON text.
// "" for other types, whose clients are found gone at the next chunk.
std::string ProbeFor(std::string_view content_type) {
  if (content_type.rfind("text/event-stream", 0) == 0) return ":\n";
  if (content_type.rfind("application/json", 0) == 0) return "\n";
  return "";
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// A header name is an RFC 9110 token; anything else would corrupt the
// response, so such headers are dropped.
bool TokenOk(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c <= ' ' || c >= 0x7f ||
        std::string_view("\"(),/:;<=>?@[\\]{}").find(c) != std::string_view::npos) {
      return false;
    }
  }
  return true;
}

// CR and LF in a value would let a handler's data inject headers.
std::string CleanValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) out += (c == '\r' || c == '\n' || c == '\0') ? ' ' : c;
  return out;
}

// Status line and headers common to whole and streamed answers. The
// session owns framing (Content-Length, Transfer-Encoding, Connection), so
// a handler's headers of those names are ignored.
template <class Message>
void FillHeaders(Message& m, const Response& r, bool keep_alive) {
  int status = r.status >= 200 && r.status <= 599 ? r.status : 500;
  m.version(11);
  m.result(static_cast<unsigned>(status));
  if (!r.content_type.empty()) m.set(bhttp::field::content_type, CleanValue(r.content_type));
  for (const auto& [name, value] : r.headers) {
    if (!TokenOk(name) || IEquals(name, "content-length") || IEquals(name, "transfer-encoding") ||
        IEquals(name, "connection")) {
      continue;
    }
    m.insert(name, CleanValue(value));
  }
  m.keep_alive(keep_alive);
}

}  // namespace

Session::Session(tcp::socket socket, Server::Impl* impl)
    : impl_(impl), id_(impl->next_session_id++), stream_(std::move(socket)) {
  beast::error_code ec;
  tcp::endpoint remote = stream_.socket().remote_endpoint(ec);
  if (!ec) {
    std::string addr = remote.address().to_string();
    peer_ = remote.address().is_v6() ? "[" + addr + "]" : addr;
    peer_ += ":" + std::to_string(remote.port());
  }
  impl_->counters.connections_open++;
  impl_->counters.connections_total++;
}

Session::~Session() {
  {
    std::lock_guard<std::mutex> lock(impl_->sessions_mu);
    impl_->sessions.erase(id_);
  }
  impl_->counters.connections_open--;
}

void Session::Start() {
  {
    std::lock_guard<std::mutex> lock(impl_->sessions_mu);
    impl_->sessions[id_] = weak_from_this();
  }
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadRequest(); });
}

void Session::Shutdown() {
  std::shared_ptr<EventStream> s;
  {
    std::lock_guard<std::mutex> lock(shared_stream_mu_);
    s = shared_stream_;
  }
  // Cancelled here, not only on the strand: its OnCancel hook must run even
  // if the io_context is stopped before the posted Close runs.
  if (s) s->Cancel();
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->Close(); });
}

// ---- reading a request ----

void Session::ReadRequest() {
  if (closing_) return;
  if (impl_->stopping) return Close();
  const ServerOptions& o = impl_->options;
  parser_.emplace();
  parser_->body_limit(o.max_body_bytes);
  parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(o.max_header_bytes, 1u << 30)));
  header_bytes_ = 0;
  read_deadline_ = net::steady_timer::clock_type::now() + Millis(o.read_timeout_ms);
  if (buffer_.size() > 0) return ReadHeader();  // pipelined: the next request is here already
  // Wait for the first byte: a new connection gets read_timeout in all, a
  // kept-alive one may idle for idle_timeout before its next request.
  stream_.expires_after(Millis(first_request_ ? o.read_timeout_ms : o.idle_timeout_ms));
  stream_.async_read_some(buffer_.prepare(4096),
                          beast::bind_front_handler(&Session::OnFirstBytes, shared_from_this()));
}

void Session::OnFirstBytes(beast::error_code ec, size_t n) {
  if (ec) return OnReadError(ec);
  buffer_.commit(n);
  if (!first_request_) {
    read_deadline_ = net::steady_timer::clock_type::now() + Millis(impl_->options.read_timeout_ms);
  }
  ReadHeader();
}

void Session::ReadHeader() {
  // What is buffered first; then more, until the header is whole. Each
  // step is PutHeaderBytes, which holds the limit for the whole header.
  while (buffer_.size() > 0 && !parser_->is_header_done()) {
    beast::error_code ec;
    const auto data = buffer_.data();
    size_t n = PutHeaderBytes(*parser_, {static_cast<const char*>(data.data()), data.size()},
                              impl_->options, &header_bytes_, ec);
    buffer_.consume(n);
    if (ec && ec != bhttp::error::need_more) return OnReadError(ec);
    if (n == 0) break;  // the parser needs more than is here
  }
  if (parser_->is_header_done()) return OnHeader();
  stream_.expires_at(read_deadline_);
  stream_.async_read_some(buffer_.prepare(4096),
                          beast::bind_front_handler(&Session::OnHeaderBytes, shared_from_this()));
}

void Session::OnHeaderBytes(beast::error_code ec, size_t n) {
  if (ec) return OnReadError(ec);
  buffer_.commit(n);
  ReadHeader();
}

void Session::OnHeader() {
  if (Status framing = CheckFraming(parser_->get()); !framing.ok()) {
    impl_->counters.rejected_malformed++;
    return Reject(HttpStatusForParseError(framing), framing.message());
  }
  auto expect = parser_->get().find(bhttp::field::expect);
  if (expect != parser_->get().end() &&
      IEquals(std::string_view(expect->value().data(), expect->value().size()), "100-continue") &&
      !parser_->is_done()) {
    // The client waits for this before sending the body (curl does for
    // large ones); without it each such request would stall a second.
    stream_.expires_at(read_deadline_);
    net::async_write(stream_, net::buffer(kContinue),
                     [self = shared_from_this()](beast::error_code wec, size_t) {
                       if (wec) return self->OnReadError(wec);
                       self->ReadBody();
                     });
    return;
  }
  ReadBody();
}

void Session::ReadBody() {
  if (parser_->is_done()) return Dispatch();
  stream_.expires_at(read_deadline_);
  bhttp::async_read(stream_, buffer_, *parser_,
                    beast::bind_front_handler(&Session::OnBody, shared_from_this()));
}

void Session::OnBody(beast::error_code ec, size_t) {
  if (ec) return OnReadError(ec);
  Dispatch();
}

void Session::OnReadError(beast::error_code ec) {
  if (closing_) return;
  if (ec == beast::error::timeout) {
    impl_->counters.timeouts++;
    return Close();  // a slow or silent client gets nothing more
  }
  static const auto& kHttpCategory = bhttp::make_error_code(bhttp::error::need_more).category();
  if (ec.category() == kHttpCategory && ec != bhttp::error::end_of_stream &&
      ec != bhttp::error::partial_message) {
    impl_->counters.rejected_malformed++;
    Status s = ParseErrorStatus(ec, impl_->options);
    return Reject(HttpStatusForParseError(s), s.message());
  }
  Close();  // the client left (eof, reset) or the server is stopping
}

// ---- routing ----

void Session::Dispatch() {
  first_request_ = false;
  impl_->counters.requests_total++;
  keep_alive_ = parser_->get().keep_alive();
  http10_ = parser_->get().version() < 11;
  auto built = BuildRequest(parser_->release(), peer_);
  parser_.reset();
  if (!built.ok()) {
    impl_->counters.rejected_malformed++;
    return Reject(400, built.status().message());
  }
  auto request = std::make_shared<Request>(std::move(built).value());
  request->client_gone = std::make_shared<ClientGone>();
  if (std::optional<Response> gate = Admit(impl_->options, request.get())) {
    if (gate->status == 401) impl_->counters.rejected_auth++;
    return Send(std::move(*gate));
  }
  std::function<void()> task = [self = shared_from_this(), request] {
    Response response;
    try {
      response = self->impl_->router.load()->Handle(*request);
    } catch (const std::bad_alloc&) {
      // The request fails; the process and every other request go on.
      std::fprintf(stderr, "http: handler for %s %s ran out of memory\n", request->method.c_str(),
                   request->path.c_str());
      response = JsonError(503, "out of memory: the server could not allocate for this request");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "http: handler for %s %s threw: %s\n", request->method.c_str(),
                   request->path.c_str(), e.what());
      response = JsonError(500, "internal error");
    } catch (...) {
      std::fprintf(stderr, "http: handler for %s %s threw\n", request->method.c_str(),
                   request->path.c_str());
      response = JsonError(500, "internal error");
    }
    net::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
      self->OnHandled(std::move(response));
    });
  };
  const auto& inline_paths = impl_->options.inline_paths;
  if (request->method == "GET" &&
      std::find(inline_paths.begin(), inline_paths.end(), request->path) != inline_paths.end()) {
    return task();  // on this strand; the answer is posted back to it
  }
  if (!impl_->pool->TrySubmit(task)) {
    impl_->counters.rejected_busy++;
    Response busy = JsonError(429, "the server is busy; retry shortly");
    busy.headers.emplace_back("Retry-After", "1");
    return Send(std::move(busy));
  }
  handling_ = true;
  gone_ = request->client_gone;
  WatchHandling();
}

void Session::WatchHandling() {
  if (watching_ || closing_ || peer_done_ || !handling_ || buffer_.size() >= kWatchBufferCap)
    return;
  watching_ = true;
  stream_.expires_never();  // a handler may take long; the client is not reading yet
  stream_.async_read_some(buffer_.prepare(1024),
                          beast::bind_front_handler(&Session::OnWatchHandling, shared_from_this()));
}

void Session::OnWatchHandling(beast::error_code ec, size_t n) {
  watching_ = false;
  if (!ec) buffer_.commit(n);  // the start of a pipelined request: kept
  if (closing_) return;
  if (ec == net::error::eof) {  // a half-close, not a leave: the answer is still wanted
    PeerDone();
    ec = {};
    if (!handled_) return;  // OnHandled sends it
  }
  if (handled_) {  // OnHandled cancelled this read to answer
    Response r = std::move(*handled_);
    handled_.reset();
    if (ec && ec != net::error::operation_aborted) {
      if (r.stream) r.stream->Cancel();
      return Close();
    }
    return Send(std::move(r));
  }
  if (ec) {  // the client left while its handler runs
    if (gone_) gone_->Signal();
    return Close();
  }
  WatchHandling();
}

void Session::OnHandled(Response response) {
  handling_ = false;
  gone_.reset();
  if (watching_ || probing_) {
    handled_ = std::move(response);
    beast::error_code ec;
    // OnWatchHandling, or the probe's end, goes on with the answer. (Nothing
    // else is pending while the watch read is: it ends before PeerDone.)
    if (watching_) stream_.socket().cancel(ec);
    return;
  }
  Send(std::move(response));
}

// ---- a client that half-closed ----

void Session::PeerDone() {
  if (peer_done_) return;
  peer_done_ = true;
  // A client may shut its sending side after its request (shutdown(SHUT_WR),
  // nc -N) and still read the answer; the read that watches the connection
  // cannot tell that from a client gone. A write can: a socket closed
  // whole answers it with a reset, which ends this wait. So write
  // something harmless and wait: an interim 100 while a handler runs (not
  // to HTTP/1.0 clients, which are found gone at the answer), the stream's
  // probe while it streams.
  stream_.socket().async_wait(tcp::socket::wait_error,
                              beast::bind_front_handler(&Session::OnBroken, shared_from_this()));
  if (handling_ && !http10_) {
    probing_ = true;
    stream_.expires_after(Millis(impl_->options.write_timeout_ms));
    net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->probing_ = false;
                       if (self->closing_) return;
                       if (ec) return self->OnBroken(ec);
                       if (!self->handled_) return;  // the answer is still to come
                       Response r = std::move(*self->handled_);
                       self->handled_.reset();
                       self->Send(std::move(r));
                     });
  } else if (active_ && !stream_finished_) {
    probe_stream_ = true;
    Pump();
  }
}

void Session::OnBroken(beast::error_code ec) {
  if (closing_ || ec == net::error::operation_aborted) return;
  // The connection broke (the client is gone), or both directions are shut
  // (the answer went out and LingerThenClose shut ours): either way, done.
  if (gone_) gone_->Signal();
  Close();
}

// ---- writing a whole answer ----

void Session::Send(Response response) {
  if (closing_) {
    if (response.stream) response.stream->Cancel();  // nobody will read it
    return;
  }
  // A client that half-closed sends nothing after what is buffered.
  if (impl_->stopping || (peer_done_ && buffer_.size() == 0)) keep_alive_ = false;
  AddCorsHeaders(impl_->options, &response);
  if (response.stream) return StartStream(std::move(response));
  WriteWhole(std::move(response));
}

void Session::Reject(int status, const std::string& message) {
  keep_alive_ = false;  // what follows on the connection cannot be trusted
  Send(JsonError(status, message));
}

void Session::WriteWhole(Response response) {
  try {
    whole_.emplace();
    FillHeaders(*whole_, response, keep_alive_);
    unsigned s = whole_->result_int();
    // These statuses have no body (RFC 9110 6.4.1); Beast refuses one.
    if (s != 204 && s != 304) whole_->body() = std::move(response.body);
    whole_->prepare_payload();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "http: cannot serialize a response: %s\n", e.what());
    return Close();
  }
  whole_serializer_.emplace(*whole_);
  WriteWholeSome();
}

void Session::WriteWholeSome() {
  stream_.expires_after(Millis(impl_->options.write_timeout_ms));
  bhttp::async_write_some(stream_, *whole_serializer_,
                          beast::bind_front_handler(&Session::OnWritten, shared_from_this()));
}

void Session::OnWritten(beast::error_code ec, size_t) {
  if (!closing_ && !ec && !whole_serializer_->is_done()) return WriteWholeSome();
  whole_serializer_.reset();
  whole_.reset();
  if (closing_) return;
  if (ec) {
    if (ec == beast::error::timeout) impl_->counters.timeouts++;
    return Close();
  }
  AfterResponse();
}

void Session::AfterResponse() {
  if (!keep_alive_ || impl_->stopping || (peer_done_ && buffer_.size() == 0)) {
    return LingerThenClose();
  }
  ReadRequest();
}

// ---- writing a streamed answer ----

void Session::StartStream(Response response) {
  active_ = std::move(response.stream);
  {
    std::lock_guard<std::mutex> lock(shared_stream_mu_);
    shared_stream_ = active_;
  }
  impl_->counters.streams_open++;
  stream_finished_ = false;
  final_chunk_ = false;
  stream_probe_ = ProbeFor(response.content_type);
  try {
    stream_header_.emplace();
    FillHeaders(*stream_header_, response, keep_alive_);
    stream_header_->set(bhttp::field::cache_control, "no-cache");
    // Proxies such as nginx buffer responses; events must flow as made.
    if (response.content_type.rfind("text/event-stream", 0) == 0) {
      stream_header_->set("X-Accel-Buffering", "no");
    }
    if (http10_) {
      // HTTP/1.0 has no chunked encoding: the body ends with the connection.
      keep_alive_ = false;
      stream_header_->keep_alive(false);
    } else {
      stream_header_->chunked(true);
    }
    stream_serializer_.emplace(*stream_header_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "http: cannot serialize a stream header: %s\n", e.what());
    return Close();
  }
  stream_.expires_after(Millis(impl_->options.write_timeout_ms));
  bhttp::async_write_header(
      stream_, *stream_serializer_,
      beast::bind_front_handler(&Session::OnStreamHeader, shared_from_this()));
}

void Session::OnStreamHeader(beast::error_code ec, size_t) {
  if (closing_) return;
  if (ec) {
    if (ec == beast::error::timeout) impl_->counters.timeouts++;
    return Close();
  }
  // The watch read below lasts as long as the stream; only writes time out.
  stream_.expires_never();
  Watch();
  std::weak_ptr<Session> weak = weak_from_this();
  active_->SetWaker([weak] {
    if (auto self = weak.lock()) self->Wake();
  });
  Pump();  // chunks sent before the waker was set
}

void Session::Wake() {
  // Many Sends between two runs of Pump post it once: the flag is cleared
  // on the strand just before Pump takes everything queued.
  if (wake_posted_.exchange(true)) return;
  // This runs on a producer's thread, inside its Send: nothing may throw
  // out of here into the producer.
  try {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->wake_posted_ = false;
      self->Pump();
    });
  } catch (const std::exception& e) {
    wake_posted_ = false;
    std::fprintf(stderr, "http: cannot wake a stream's session: %s\n", e.what());
  }
}

void Session::Pump() {
  if (closing_ || !active_ || writing_ || stream_finished_) return;
  std::vector<std::string> chunks;
  bool closed = false;
  active_->Take(&chunks, &closed);
  if (active_->cancelled()) return Close();  // a slow client, or Stop: cut the body short
  if (probe_stream_) {  // PeerDone asks: a write tells whether the client is there
    probe_stream_ = false;
    chunks.push_back(stream_probe_);
  }
  chunks_out_.clear();
  for (const std::string& c : chunks) {
    if (c.empty()) continue;  // a zero-size chunk would end the body
    if (http10_) {
      chunks_out_ += c;
      continue;
    }
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", c.size());
    chunks_out_ += size;
    chunks_out_ += c;
    chunks_out_ += "\r\n";
  }
  if (closed) {
    if (!http10_) chunks_out_ += "0\r\n\r\n";
    final_chunk_ = true;
  }
  if (chunks_out_.empty()) {
    if (final_chunk_) FinishStream();  // HTTP/1.0: nothing more to write, the close ends it
    return;
  }
  chunks_sent_ = 0;
  WriteChunks();
}

void Session::WriteChunks() {
  writing_ = true;
  const size_t n = std::min(kWriteSlice, chunks_out_.size() - chunks_sent_);
  stream_.expires_after(Millis(impl_->options.write_timeout_ms));
  net::async_write(stream_, net::buffer(chunks_out_.data() + chunks_sent_, n),
                   beast::bind_front_handler(&Session::OnChunksWritten, shared_from_this()));
}

void Session::OnChunksWritten(beast::error_code ec, size_t n) {
  writing_ = false;
  if (closing_) return;
  if (ec) {
    if (ec == beast::error::timeout) impl_->counters.timeouts++;
    return Close();
  }
  chunks_sent_ += n;
  if (chunks_sent_ < chunks_out_.size()) return WriteChunks();
  if (final_chunk_) return FinishStream();
  Pump();
}

void Session::Watch() {
  if (watching_ || closing_ || peer_done_ || buffer_.size() >= kWatchBufferCap) return;
  watching_ = true;
  stream_.async_read_some(buffer_.prepare(1024),
                          beast::bind_front_handler(&Session::OnWatch, shared_from_this()));
}

void Session::OnWatch(beast::error_code ec, size_t n) {
  watching_ = false;
  if (!ec) buffer_.commit(n);  // the start of a pipelined request: kept
  if (closing_) return;
  if (ec == net::error::eof) {  // a half-close, not a leave: the stream goes on
    PeerDone();
    ec = {};
    if (!stream_finished_) return;
  }
  if (stream_finished_) {  // FinishStream cancelled this read to go on
    if (ec && ec != net::error::operation_aborted) return Close();
    return AfterResponse();
  }
  if (ec) return Close();  // the client left: Close cancels the stream's producer
  Watch();
}

void Session::FinishStream() {
  stream_finished_ = true;
  DropStream(false);
  stream_serializer_.reset();
  stream_header_.reset();
  if (watching_) {
    stream_.cancel();  // OnWatch continues with AfterResponse
    return;
  }
  AfterResponse();
}

void Session::DropStream(bool cancel) {
  if (!active_) return;
  if (cancel) active_->Cancel();
  if (active_->cancelled()) impl_->counters.streams_cancelled++;
  active_->SetWaker(nullptr);
  {
    std::lock_guard<std::mutex> lock(shared_stream_mu_);
    shared_stream_.reset();
  }
  active_.reset();
  impl_->counters.streams_open--;
}

// ---- closing ----

void Session::Close() {
  if (closing_) return;
  closing_ = true;
  // A handler still running answers no one: it stops as when the client
  // leaves (Server::Stop closes connections this way).
  if (gone_) gone_->Signal();
  DropStream(true);  // a body cut short: its producer stops (OnCancel runs)
  if (handled_ && handled_->stream) handled_->stream->Cancel();  // an answer never sent
  handled_.reset();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

void Session::LingerThenClose() {
  if (closing_) return;
  // Closing with unread request bytes makes the kernel send a reset, which
  // can destroy our answer (a 413, say) before the client reads it. So
  // send FIN first and read and discard what still comes, briefly.
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return Close();
  stream_.expires_after(Millis(std::min(impl_->options.read_timeout_ms, 1000)));
  Drain();
}

void Session::Drain() {
  buffer_.consume(buffer_.size());
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            if (ec || self->closing_) return self->Close();
                            self->Drain();
                          });
}

}  // namespace braid::http
