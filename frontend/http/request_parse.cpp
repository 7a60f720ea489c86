#include "http/request_parse.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <cctype>
#include <cstdint>
#include <limits>
#include <vector>

namespace braid::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Boost 1.74's string_view is its own type.
std::string_view Sv(beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

Result<std::string> PercentDecode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      int hi = i + 2 < in.size() ? HexValue(in[i + 1]) : -1;
      int lo = hi >= 0 ? HexValue(in[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return Status::InvalidArgument("bad percent-encoding at offset " + std::to_string(i));
      }
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

Result<std::map<std::string, std::string>> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= query.size()) {
    size_t amp = query.find('&', start);
    if (amp == std::string_view::npos) amp = query.size();
    std::string_view pair = query.substr(start, amp - start);
    if (!pair.empty()) {
      size_t eq = pair.find('=');
      std::string_view name = pair.substr(0, eq);
      std::string_view value =
          eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
      BRAID_ASSIGN_OR_RETURN(std::string n, PercentDecode(name, true));
      BRAID_ASSIGN_OR_RETURN(std::string v, PercentDecode(value, true));
      out[std::move(n)] = std::move(v);
    }
    start = amp + 1;
  }
  return out;
}

Status SplitTarget(std::string_view target, Request* request) {
  request->target = std::string(target);
  // Only origin-form ("/path?query"): we are no proxy, and "*" is only
  // meaningful for a server-wide OPTIONS, which no route serves.
  if (target.empty() || target[0] != '/') {
    return Status::InvalidArgument("request target must start with '/'");
  }
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  // A fragment never travels over HTTP; drop one a client sent anyway.
  std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  if (size_t f = query.find('#'); f != std::string_view::npos) query = query.substr(0, f);
  if (size_t f = path.find('#'); f != std::string_view::npos) path = path.substr(0, f);
  auto decoded = PercentDecode(path, false);
  if (!decoded.ok()) return decoded.status().WithContext("path");
  // A NUL would end the path early for anything that hands it to C.
  if (decoded->find('\0') != std::string::npos) {
    return Status::InvalidArgument("path contains a NUL byte");
  }
  request->path = std::move(decoded).value();
  auto params = ParseQuery(query);
  if (!params.ok()) return params.status().WithContext("query");
  request->query = std::move(params).value();
  return Status::Ok();
}

Result<Request> BuildRequest(bhttp::request<bhttp::string_body>&& message, std::string peer) {
  Request request;
  request.method = std::string(message.method_string());
  BRAID_RETURN_IF_ERROR(SplitTarget(Sv(message.target()), &request));
  for (const auto& field : message) {
    std::string name = Lower(Sv(field.name_string()));
    auto [it, inserted] = request.headers.emplace(name, std::string(Sv(field.value())));
    // RFC 9110 5.3: repeated fields are one list, in order.
    if (!inserted) {
      it->second += ", ";
      it->second += Sv(field.value());
    }
  }
  request.body = std::move(message.body());
  request.peer = std::move(peer);
  return request;
}

int HttpStatusForParseError(const Status& status) {
  switch (status.code()) {
    case StatusCode::kTooLarge:
      return 413;
    case StatusCode::kResourceExhausted:
      return 431;
    case StatusCode::kUnsupported:
      return 501;
    default:
      return 400;
  }
}

Status ParseErrorStatus(const beast::error_code& ec, const ServerOptions& options) {
  if (ec == bhttp::error::body_limit) {
    return Status::TooLarge("request body exceeds the limit of " +
                            std::to_string(options.max_body_bytes) + " bytes");
  }
  if (ec == bhttp::error::header_limit) {
    return Status::ResourceExhausted("request headers exceed the limit of " +
                                     std::to_string(options.max_header_bytes) + " bytes");
  }
  return Status::InvalidArgument("malformed request: " + ec.message());
}

size_t PutHeaderBytes(RequestParser& parser, std::string_view bytes, const ServerOptions& options,
                      size_t* header_bytes, beast::error_code& ec) {
  const size_t n = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  *header_bytes += n;
  // What the parser has not consumed yet (part of a field) is bounded by its
  // own header_limit; what it has is counted here.
  if ((!ec || ec == bhttp::error::need_more) && *header_bytes > options.max_header_bytes) {
    ec = bhttp::error::header_limit;
  }
  return n;
}

Status CheckFraming(const bhttp::request_header<>& header) {
  auto [first, last] = header.equal_range(bhttp::field::transfer_encoding);
  if (first == last) return Status::Ok();
  if (header.find(bhttp::field::content_length) != header.end()) {
    return Status::InvalidArgument(
        "Transfer-Encoding and Content-Length together: the body's length is ambiguous");
  }
  if (header.version() < 11) {
    return Status::InvalidArgument("Transfer-Encoding in an HTTP/1.0 request");
  }
  // The codings of every Transfer-Encoding field, in order, lower-cased (a
  // list: "gzip, chunked" is two; empty elements do not count).
  std::vector<std::string> codings;
  for (auto it = first; it != last; ++it) {
    std::string_view list = Sv(it->value());
    while (!list.empty()) {
      const size_t comma = std::min(list.find(','), list.size());
      std::string_view item = list.substr(0, comma);
      item = item.substr(0, std::min(item.find(';'), item.size()));  // no parameters
      while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
      while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
      if (!item.empty()) codings.push_back(Lower(item));
      list.remove_prefix(std::min(comma + 1, list.size()));
    }
  }
  if (codings.empty() || codings.back() != "chunked") {
    return Status::InvalidArgument("the last transfer coding must be chunked");
  }
  codings.pop_back();
  if (std::find(codings.begin(), codings.end(), "chunked") != codings.end()) {
    return Status::InvalidArgument("chunked is applied more than once");
  }
  if (!codings.empty()) {
    return Status::Unsupported("transfer coding '" + codings.front() +
                               "' is not supported (only chunked is)");
  }
  return Status::Ok();
}

Result<Request> ParseRequestBytes(std::string_view raw, const ServerOptions& options) {
  RequestParser parser;
  parser.body_limit(options.max_body_bytes);
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(options.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  // The header first, as the session reads it.
  size_t used = 0, header_bytes = 0;
  while (!parser.is_header_done()) {
    beast::error_code ec;
    size_t n = PutHeaderBytes(parser, raw.substr(used), options, &header_bytes, ec);
    used += n;
    if (ec && ec != bhttp::error::need_more) return ParseErrorStatus(ec, options);
    if (n == 0 && !parser.is_header_done()) return Status::InvalidArgument("request ends early");
  }
  BRAID_RETURN_IF_ERROR(CheckFraming(parser.get()));
  parser.eager(true);
  // Then the body: the parser consumes what it can and asks for more
  // (need_more); feeding the rest in a loop is what the async read does as
  // bytes arrive.
  while (!parser.is_done()) {
    beast::error_code ec;
    size_t n = parser.put(boost::asio::buffer(raw.data() + used, raw.size() - used), ec);
    used += n;
    if (ec == bhttp::error::need_more) {
      if (used >= raw.size()) break;
      if (n == 0) break;  // cannot happen with a whole buffer; never spin
      continue;
    }
    if (ec) return ParseErrorStatus(ec, options);
    if (n == 0 && !parser.is_done()) break;
  }
  if (!parser.is_done()) {
    // A body delimited by the end of the connection has no end in a buffer.
    beast::error_code ec;
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return Status::InvalidArgument("request ends early");
  }
  return BuildRequest(parser.release(), "");
}

}  // namespace braid::http
