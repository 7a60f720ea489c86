// The preamble the run service's routes share (routes.h): the service gone or
// stopping, new work while draining, the session in the path (unknown, of
// another kind, another client's, finished, charged for the body), the
// variable id, the body as a JSON object, and the order of the checks.
#include "server/routes.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/fakes.h"

namespace braid::server {
namespace {

using nlohmann::json;
using rt::testing::FakeEngine;
using rt::testing::MemoryStore;

struct Service {
  explicit Service(bool keyed = false) {
    rt::RuntimeOptions ro;
    ro.engines = {&engine};
    ro.store = std::make_shared<MemoryStore>();
    runtime = std::move(rt::Runtime::Open(ro)).value();
    RunsOptions o;
    o.runtime = runtime.get();
    o.max_programs = 1;
    o.keyed = keyed;
    o.dag_limits.max_depth = 3;
    impl = std::make_shared<RunsService::Impl>(o);
  }
  ~Service() {
    impl->stopping = true;
    impl->pool.Stop();
    impl.reset();
    runtime.reset();
  }
  // A session (or a run of another kind) owned by `client`, running.
  std::shared_ptr<Entry> Add(const std::string& kind, const std::string& client) {
    http::Response refusal;
    auto account = impl->Admit(client, 1024, &refusal);
    REQUIRE(account);
    auto e = impl->Start(kind, "", "", {}, client, {{"kind", kind}}, std::move(account));
    REQUIRE(e.ok());
    std::lock_guard<std::mutex> lock((*e)->mu);
    (*e)->state = "running";
    return *e;
  }
  // OpenRoute for a request of `client` with this method, body and params.
  std::optional<http::Response> Open(unsigned needs, const std::string& method,
                                     const std::string& body, const http::Params& p,
                                     RouteContext* c, const std::string& client = "alice") {
    http::Request r;
    r.method = method;
    r.body = body;
    r.client = client;
    return OpenRoute(impl, needs, r, p, c);
  }

  FakeEngine engine;
  std::unique_ptr<rt::Runtime> runtime;
  std::shared_ptr<RunsService::Impl> impl;
};

std::string Message(const http::Response& r) {
  return json::parse(r.body)["error"]["message"].get<std::string>();
}

bool HasRetryAfter(const http::Response& r) {
  for (const auto& [k, v] : r.headers)
    if (k == "Retry-After") return true;
  return false;
}

TEST_CASE("a service gone or stopping answers 503 before anything else") {
  Service s;
  RouteContext c;
  std::weak_ptr<RunsService::Impl> gone;
  http::Request r;
  auto err = OpenRoute(gone, kSession | kBody, r, {{"id", "x"}}, &c);
  REQUIRE(err);
  CHECK(err->status == 503);
  CHECK(Message(*err) == "the server is stopping");
  s.impl->stopping = true;
  err = s.Open(kBody, "POST", "not json", {}, &c);
  REQUIRE(err);
  CHECK(err->status == 503);
  s.impl->stopping = false;
  CHECK_FALSE(s.Open(kNoNeed, "GET", "", {}, &c));
  CHECK(c.impl == s.impl);
}

TEST_CASE("new work is refused while draining, other routes go on") {
  Service s;
  RouteContext c;
  s.impl->draining = true;
  auto err = s.Open(kNewWork | kOptionalBody, "POST", "[not json", {}, &c);
  REQUIRE(err);
  CHECK(err->status == 503);  // draining is checked before the body
  CHECK(HasRetryAfter(*err));
  CHECK_FALSE(s.Open(kOptionalBody, "POST", "", {}, &c));
}

TEST_CASE("the session in the path: unknown, another kind, another client's, finished") {
  Service s(/*keyed=*/true);
  auto session = s.Add("session", "alice");
  auto program = s.Add("program", "alice");
  RouteContext c;
  auto err = s.Open(kSession, "GET", "", {{"id", "nope"}}, &c);
  REQUIRE(err);
  CHECK(err->status == 404);
  CHECK(Message(*err) == "no session 'nope'");
  err = s.Open(kSession, "GET", "", {{"id", program->id}}, &c);
  REQUIRE(err);
  CHECK(err->status == 404);
  // Another client's session reads as one that does not exist.
  err = s.Open(kSession, "GET", "", {{"id", session->id}}, &c, "bob");
  REQUIRE(err);
  CHECK(err->status == 404);
  CHECK(Message(*err) == "no session '" + session->id + "'");

  session->last_used_ms = 0;
  REQUIRE_FALSE(s.Open(kSession, "GET", "", {{"id", session->id}}, &c));
  CHECK(c.session == session);
  CHECK(session->last_used_ms > 0);  // marked used

  session->run->Cancel();
  session->run->Finish(Status::Ok());
  s.impl->Complete(session, "done", nullptr, "");
  err = s.Open(kSession, "GET", "", {{"id", session->id}}, &c);
  REQUIRE(err);
  CHECK(err->status == 409);
  CHECK(Message(*err) == "session '" + session->id + "' is done");
}

TEST_CASE("a session is charged for what a request other than GET adds") {
  Service s;
  auto session = s.Add("session", "alice");
  RouteContext c;
  const size_t before = session->account->held();
  const std::string body = R"({"name": "x", "value": "some text"})";
  REQUIRE_FALSE(s.Open(kSession | kBody, "POST", body, {{"id", session->id}}, &c));
  CHECK(session->account->held() == before + body.size());
  REQUIRE_FALSE(s.Open(kSession, "GET", body, {{"id", session->id}}, &c));
  CHECK(session->account->held() == before + body.size());
}

TEST_CASE("the variable id in the path") {
  Service s;
  auto session = s.Add("session", "alice");
  RouteContext c;
  for (const char* bad : {"0", "-1", "abc", "", "3x"}) {
    auto err = s.Open(kSession | kVar, "GET", "", {{"id", session->id}, {"var", bad}}, &c);
    REQUIRE(err);
    CHECK(err->status == 400);
    CHECK(Message(*err) == "'" + std::string(bad) + "' is not a variable id");
  }
  REQUIRE_FALSE(s.Open(kSession | kVar, "GET", "", {{"id", session->id}, {"var", "42"}}, &c));
  CHECK(c.var == 42);
  // The session first: an unknown one is 404 whatever the variable.
  auto err = s.Open(kSession | kVar, "GET", "", {{"id", "nope"}, {"var", "abc"}}, &c);
  REQUIRE(err);
  CHECK(err->status == 404);
}

TEST_CASE("the body: one JSON object, within the depth limit, empty as {} only where asked") {
  Service s;
  RouteContext c;
  REQUIRE_FALSE(s.Open(kBody, "POST", R"({"source": "return 1", "args": ["a"]})", {}, &c));
  CHECK(c.body["source"] == "return 1");
  CHECK(c.body["args"] == json::array({"a"}));

  auto err = s.Open(kBody, "POST", "[1, 2]", {}, &c);
  REQUIRE(err);
  CHECK(err->status == 400);
  CHECK(Message(*err) == "the body must be a JSON object");
  err = s.Open(kBody, "POST", "", {}, &c);
  REQUIRE(err);
  CHECK(err->status == 400);
  // max_depth is 3 in this service (RunsOptions::dag_limits).
  CHECK_FALSE(s.Open(kBody, "POST", R"({"a": {"b": {"c": 1}}})", {}, &c));
  err = s.Open(kBody, "POST", R"({"a": {"b": {"c": [1]}}})", {}, &c);
  REQUIRE(err);
  CHECK(Message(*err).find("limit of 3") != std::string::npos);

  c.body = nullptr;
  REQUIRE_FALSE(s.Open(kOptionalBody, "POST", "", {}, &c));
  CHECK(c.body == json::object());
}

TEST_CASE("Route answers the preamble's error or calls the handler with what it found") {
  Service s;
  auto session = s.Add("session", "alice");
  int calls = 0;
  http::Handler h = Route(
      s.impl, kSession | kVar | kBody,
      [&](RouteContext& c, const http::Request&, const http::Params& p) {
        ++calls;
        CHECK(c.session == session);
        CHECK(p.at("id") == session->id);
        return http::JsonResponse(200, json{{"var", c.var}, {"value", c.body["value"]}}.dump());
      });
  http::Request r;
  r.method = "PUT";
  r.client = "alice";
  r.body = "{";
  http::Response bad = h(r, {{"id", session->id}, {"var", "7"}});
  CHECK(bad.status == 400);
  CHECK(calls == 0);
  r.body = R"({"value": "v"})";
  http::Response ok = h(r, {{"id", session->id}, {"var", "7"}});
  CHECK(ok.status == 200);
  CHECK(calls == 1);
  CHECK(json::parse(ok.body) == json{{"var", 7}, {"value", "v"}});
}

}  // namespace
}  // namespace braid::server
