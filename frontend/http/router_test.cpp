// The router and the plain HTTP types: matching, 404/405, the error shape,
// SSE framing and the event stream's bounded queue and cancellation.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "http/http_types.h"

namespace braid::http {
namespace {

Request Req(std::string method, std::string path) {
  Request r;
  r.method = std::move(method);
  r.path = std::move(path);
  r.target = r.path;
  return r;
}

TEST_CASE("router matches literal and {param} segments, 404 and 405 otherwise") {
  Router router;
  router.Add("GET", "/v1/runs",
             [](const Request&, const Params&) { return JsonResponse(200, "[]"); });
  router.Add("GET", "/v1/runs/{id}", [](const Request&, const Params& p) {
    return JsonResponse(200, nlohmann::json{{"id", p.at("id")}}.dump());
  });
  router.Add("DELETE", "/v1/runs/{id}",
             [](const Request&, const Params&) { return JsonResponse(204, ""); });

  CHECK(router.Handle(Req("GET", "/v1/runs")).body == "[]");
  CHECK(router.Handle(Req("GET", "/v1/runs/")).body == "[]");  // a trailing slash is the same path
  Response one = router.Handle(Req("GET", "/v1/runs/r42"));
  CHECK(nlohmann::json::parse(one.body)["id"] == "r42");
  CHECK(router.Handle(Req("DELETE", "/v1/runs/r42")).status == 204);

  Response missing = router.Handle(Req("GET", "/v1/runs/r42/nodes"));
  CHECK(missing.status == 404);
  auto e = nlohmann::json::parse(missing.body);
  CHECK(e["error"]["type"] == "not_found_error");
  CHECK(e["error"]["message"].get<std::string>().find("/v1/runs/r42/nodes") != std::string::npos);

  Response wrong = router.Handle(Req("POST", "/v1/runs/r42"));
  CHECK(wrong.status == 405);
  REQUIRE(wrong.headers.size() == 1);
  CHECK(wrong.headers[0].first == "Allow");
  CHECK(wrong.headers[0].second == "GET, DELETE");
}

TEST_CASE("JsonError has OpenAI's shape with a type from the status") {
  auto e = nlohmann::json::parse(JsonError(429, "queue full").body)["error"];
  CHECK(e["message"] == "queue full");
  CHECK(e["type"] == "rate_limit_error");
  CHECK(e["param"].is_null());
  CHECK(e["code"].is_null());
  auto p = nlohmann::json::parse(JsonError(400, "bad", "", "max_tokens", "too_long").body)["error"];
  CHECK(p["type"] == "invalid_request_error");
  CHECK(p["param"] == "max_tokens");
  CHECK(p["code"] == "too_long");
  CHECK(JsonError(503, "loading").status == 503);
}

TEST_CASE("SseEvent frames multi-line payloads and named events") {
  CHECK(SseEvent("[DONE]") == "data: [DONE]\n\n");
  CHECK(SseEvent("a\nb", "node") == "event: node\ndata: a\ndata: b\n\n");
}

TEST_CASE("EventStream: queued chunks in order, close, cancel hook once, bounded queue") {
  EventStream s(16);
  int wakes = 0;
  s.SetWaker([&] { ++wakes; });
  int cancels = 0;
  s.OnCancel([&] { ++cancels; });
  CHECK(s.Send("hello "));
  CHECK(s.Send("world"));
  std::vector<std::string> out;
  bool closed = true;
  s.Take(&out, &closed);
  CHECK(out == std::vector<std::string>{"hello ", "world"});
  CHECK_FALSE(closed);
  CHECK(wakes == 2);
  // Over the cap: the client is too slow; the stream is cancelled.
  CHECK(s.Send("0123456789"));
  CHECK_FALSE(s.Send("0123456789"));
  CHECK(s.cancelled());
  CHECK(cancels == 1);
  s.Cancel();
  CHECK(cancels == 1);
  CHECK_FALSE(s.Send("x"));

  EventStream done;
  CHECK(done.Send("a"));
  done.Close();
  done.Cancel();  // a finished stream is not cancelled
  CHECK_FALSE(done.cancelled());
  out.clear();
  done.Take(&out, &closed);
  CHECK(closed);
  CHECK(out.size() == 1);

  EventStream late;
  late.Cancel();
  bool ran = false;
  late.OnCancel([&] { ran = true; });  // already cancelled: runs at once
  CHECK(ran);
}

}  // namespace
}  // namespace braid::http
