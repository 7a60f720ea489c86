// libFuzzer target: the request path of the HTTP server without sockets.
// Arbitrary bytes go through the session's own steps (Beast's parser with
// the server's limits, target decoding, header folding, the API key and
// CORS gate) and then a router with parameterised routes and a JSON body
// parser. Any input must give a Status or a Request that routes to a
// response with a valid status; sanitizers catch the rest.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/http_types.h"
#include "http/json_body.h"
#include "http/request_parse.h"
#include "http/server.h"

namespace {

using namespace braid::http;

const Router& FuzzRouter() {
  static const Router* router = [] {
    auto* r = new Router;
    r->Add("GET", "/health", [](const Request&, const Params&) { return JsonResponse(200, "{}"); });
    r->Add("GET", "/v1/runs/{id}", [](const Request& q, const Params& p) {
      return JsonResponse(200, "{\"id\": " + std::to_string(p.at("id").size()) + "}");
    });
    r->Add("POST", "/v1/chat/completions", [](const Request& q, const Params&) {
      auto body = ParseJsonBody(q.body, 16);
      if (!body.ok()) return JsonError(400, body.status().message());
      return JsonResponse(200,
                          body->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    });
    r->Add("DELETE", "/v1/runs/{id}/nodes/{node}",
           [](const Request&, const Params&) { return JsonResponse(204, ""); });
    return r;
  }();
  return *router;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the server's configuration; the rest is the wire.
  const uint8_t mode = data[0];
  std::string_view raw(reinterpret_cast<const char*>(data + 1), size - 1);
  ServerOptions options;
  options.max_body_bytes = (mode & 1) ? 64 : 4096;
  options.max_header_bytes = (mode & 2) ? 128 : 2048;
  if (mode & 4) options.api_keys = {{"sk-fuzz-key-1", "fuzzer"}};
  if (mode & 8) options.cors_origin = "*";

  // The decoders alone, on raw bytes.
  (void)PercentDecode(raw.substr(0, 256), (mode & 16) != 0);
  (void)ParseQuery(raw.substr(0, 256));

  auto request = ParseRequestBytes(raw, options);
  if (!request.ok()) {
    int status = HttpStatusForParseError(request.status());
    if (status != 400 && status != 413 && status != 431 && status != 501) __builtin_trap();
    return 0;
  }
  Request& q = request.value();
  if (q.path.empty() || q.path[0] != '/') __builtin_trap();
  std::optional<Response> gate = Admit(options, &q);
  Response response = gate ? std::move(*gate) : FuzzRouter().Handle(q);
  AddCorsHeaders(options, &response);
  if (response.status < 100 || response.status > 599) __builtin_trap();
  if (!options.api_keys.empty() && !gate && q.path != "/health" && q.client != "fuzzer" &&
      !(q.method == "OPTIONS" && !options.cors_origin.empty())) {
    __builtin_trap();  // routed without a key
  }
  return 0;
}
