// From bytes to a routed Request, without sockets: the steps a session
// applies to every request (Beast's parser with the server's limits, the
// target's decoding, header folding, the authentication and CORS gate).
// The session and the fuzz target (tests/fuzz/fuzz_http.cpp) share them, so
// the fuzzer exercises exactly what a client reaches. Internal to the server.
#pragma once

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "engine/status.h"
#include "http/http_types.h"
#include "http/server.h"

namespace braid::http {

// "%41b+c" -> "Ab c" when plus_is_space (query strings), "Ab+c" otherwise
// (paths). InvalidArgument for a '%' not followed by two hex digits.
Result<std::string> PercentDecode(std::string_view in, bool plus_is_space);

// "a=1&b=x%20y&flag" -> {a: 1, b: "x y", flag: ""}; a repeated name keeps
// its last value. InvalidArgument for bad percent-encoding.
Result<std::map<std::string, std::string>> ParseQuery(std::string_view query);

// Fills request->target, path (decoded) and query from an origin-form target
// ("/path?query"). InvalidArgument for any other form, bad percent-encoding
// or a NUL in the decoded path.
Status SplitTarget(std::string_view target, Request* request);

// The router's view of a parsed message: method, target, path, query,
// lower-cased headers (repeated ones joined with ", "), the body and `peer`.
Result<Request> BuildRequest(boost::beast::http::request<boost::beast::http::string_body>&& message,
                             std::string peer);

// What the session answers before routing, or nullopt to route the request:
// the CORS preflight (204) when cors_origin is set and the method is
// OPTIONS; 401 (with WWW-Authenticate: Bearer) when keys are configured,
// the path is not public and "Authorization: Bearer KEY" does not name a
// key. Sets request->client to the key's name when it does.
std::optional<Response> Admit(const ServerOptions& options, Request* request);

// Adds Access-Control-Allow-Origin (and Vary: Origin) to `response` when
// options.cors_origin is set; nothing otherwise.
void AddCorsHeaders(const ServerOptions& options, Response* response);

// The HTTP status answering a request that could not be read, from the
// Status of ParseRequestBytes/BuildRequest/CheckFraming: TooLarge (body over
// the limit) 413, ResourceExhausted (headers over the limit) 431,
// Unsupported (a transfer coding we do not decode) 501, anything else 400.
int HttpStatusForParseError(const Status& status);

// The Status for a Beast parser error: TooLarge for body_limit,
// ResourceExhausted for header_limit, InvalidArgument for the rest.
Status ParseErrorStatus(const boost::beast::error_code& ec, const ServerOptions& options);

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// One step of reading a request's header: feeds `bytes` to `parser` (not
// eager, so that a step stops at the header's end) and returns how many it
// consumed, adding them to *header_bytes. Beast 1.74 checks header_limit
// against each buffer it is given, not the whole header (fields taken from
// an earlier buffer are not counted, so well over 16 KiB of small fields
// passed a 16 KiB limit); the count is kept here: `ec` is header_limit once
// the header section (request line and fields) passes max_header_bytes.
size_t PutHeaderBytes(RequestParser& parser, std::string_view bytes, const ServerOptions& options,
                      size_t* header_bytes, boost::beast::error_code& ec);

// The framing rules of RFC 9112 6.1 and 6.3 that Beast leaves to us, checked
// once the header is read. A body whose length two parsers could read
// differently (a proxy in front of us, and us) is how requests are
// smuggled, so with Transfer-Encoding there must be no Content-Length, the
// request must be HTTP/1.1 and the codings must end with a single chunked:
// InvalidArgument (400, and the connection is closed) otherwise. Another
// coding before chunked (gzip, ...) is Unsupported (501): we decode none.
Status CheckFraming(const boost::beast::http::request_header<>& header);

// Parses one whole request from `raw` with the limits of `options` (the
// session's steps: PutHeaderBytes, CheckFraming, then the body, fed from a
// buffer instead of a socket). Errors: as HttpStatusForParseError describes;
// InvalidArgument also when `raw` ends before the request does.
Result<Request> ParseRequestBytes(std::string_view raw, const ServerOptions& options);

}  // namespace braid::http
