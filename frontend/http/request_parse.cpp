#include "http/request_parse.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <cctype>
#include <cstdint>
#include <limits>

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
    case StatusCode::kOutOfRange:
      return 413;
    case StatusCode::kResourceExhausted:
      return 431;
    default:
      return 400;
  }
}

Status ParseErrorStatus(const beast::error_code& ec, const ServerOptions& options) {
  if (ec == bhttp::error::body_limit) {
    return Status::OutOfRange("request body exceeds the limit of " +
                              std::to_string(options.max_body_bytes) + " bytes");
  }
  if (ec == bhttp::error::header_limit) {
    return Status::ResourceExhausted("request headers exceed the limit of " +
                                     std::to_string(options.max_header_bytes) + " bytes");
  }
  return Status::InvalidArgument("malformed request: " + ec.message());
}

Result<Request> ParseRequestBytes(std::string_view raw, const ServerOptions& options) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.body_limit(options.max_body_bytes);
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(options.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser.eager(true);
  // The parser consumes what it can and asks for more (need_more); feeding
  // the rest in a loop is what the async read does as bytes arrive.
  size_t used = 0;
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
