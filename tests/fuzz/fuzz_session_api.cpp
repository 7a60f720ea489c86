// libFuzzer target for the incremental API's request bodies: a RunsService
// over a fake engine (no store), its routes on a router, and one session
// that inputs keep building. The first byte picks the route (and, for the
// variable routes, which variable); the rest is the body: POST
// .../functions, .../calls and .../vars, PUT .../vars/{n}, GET
// .../vars/{n} with timeout_ms=0. Every answer must be a valid status with
// a JSON body; a crash, a hang or an escaping exception is a failure.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "http/http_types.h"
#include "server/runs_service.h"
#include "testing/fakes.h"

namespace {

using namespace braid;

void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz_session_api: %s %s\n", what, detail.c_str());
  std::abort();
}

// Inputs per session: the session is closed and a new one opened after
// this many, so that it does not only answer "too many calls".
constexpr int kInputsPerSession = 2000;

struct Harness {
  rt::testing::FakeEngine engine;
  std::unique_ptr<rt::Runtime> runtime;
  std::unique_ptr<server::RunsService> service;
  http::Router router;
  std::string session;  // "/v1/sessions/ID"
  int inputs = 0;

  Harness() {
    rt::RuntimeOptions ro;
    ro.engines = {&engine};
    auto opened = rt::Runtime::Open(ro);
    if (!opened.ok()) Fail("cannot open the runtime");
    runtime = std::move(opened).value();
    server::RunsOptions o;
    o.runtime = runtime.get();
    o.max_programs = 1;
    o.max_queued = 1;
    o.dag_limits.max_functions = 16;
    o.dag_limits.max_nodes = 256;
    o.dag_limits.max_text_bytes = 4096;
    o.dag_limits.max_depth = 16;
    o.max_wait_ms = 100;
    service = std::make_unique<server::RunsService>(o);
    service->AddRoutes(&router);
    NewSession();
  }

  http::Response Handle(std::string method, std::string path, std::string body = "",
                        std::map<std::string, std::string> query = {}) {
    http::Request r;
    r.method = std::move(method);
    r.path = std::move(path);
    r.target = r.path;
    r.query = std::move(query);
    r.body = std::move(body);
    r.client = "fuzzer";
    return router.Handle(r);
  }

  void NewSession() {
    if (!session.empty()) Handle("DELETE", session);
    http::Response r = Handle("POST", "/v1/sessions", "{\"name\": \"fuzz\"}");
    if (r.status != 201) Fail("cannot open a session", r.body);
    session = "/v1/sessions/" + nlohmann::json::parse(r.body)["id"].get<std::string>();
  }
};

Harness& H() {
  static Harness* h = new Harness;  // never destroyed: its threads outlive static destructors
  return *h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Harness& h = H();
  if (++h.inputs % kInputsPerSession == 0) h.NewSession();
  const uint8_t selector = data[0];
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string var = std::to_string(selector / 5);  // 0..51: some unknown, 0 invalid
  http::Response r;
  switch (selector % 5) {
    case 0:
      r = h.Handle("POST", h.session + "/functions", std::move(body));
      break;
    case 1:
      r = h.Handle("POST", h.session + "/calls", std::move(body));
      break;
    case 2:
      r = h.Handle("POST", h.session + "/vars", std::move(body));
      break;
    case 3:
      r = h.Handle("PUT", h.session + "/vars/" + var, std::move(body));
      break;
    default: {
      // The body, when short, is the query's criteria (valid or not).
      std::map<std::string, std::string> query = {{"timeout_ms", "0"}};
      if (!body.empty() && body.size() < 16) query["criteria"] = body;
      r = h.Handle("GET", h.session + "/vars/" + var, "", std::move(query));
      break;
    }
  }
  if (r.status < 200 || r.status > 599) Fail("an invalid status", std::to_string(r.status));
  if (r.stream) Fail("a session route answered with a stream");
  if (r.status >= 500 && r.status != 501) Fail("a server error", r.body);
  if (nlohmann::json::parse(r.body, nullptr, false).is_discarded())
    Fail("an answer that is not JSON", r.body);
  return 0;
}
