#include "cli/status_routes.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

namespace braid::cli {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The server's own series after the API's: connections, rejections, and
// runs by state.
std::string ServerMetrics(const http::Server::Stats& s, const server::RunsService::Counts& c) {
  std::string out;
  auto add = [&](const char* name, const char* type, const char* help, uint64_t v,
                 const std::string& labels = "") {
    out += std::string("# HELP braid:") + name + " " + help + "\n# TYPE braid:" + name + " " +
           type + "\n";
    out += std::string("braid:") + name + labels + " " + std::to_string(v) + "\n";
  };
  add("http_connections_open", "gauge", "Open HTTP connections.", s.connections_open);
  add("http_requests_total", "counter", "HTTP requests read whole.", s.requests_total);
  add("http_requests_queued", "gauge", "Requests waiting for a handler thread.", s.requests_queued);
  add("http_rejected_busy_total", "counter", "429: the handler queue was full.", s.rejected_busy);
  add("http_rejected_auth_total", "counter", "401: no or a wrong API key.", s.rejected_auth);
  add("http_rejected_malformed_total", "counter", "400/413/431 before routing.",
      s.rejected_malformed);
  add("http_streams_open", "gauge", "Streamed responses in progress.", s.streams_open);
  add("http_streams_cancelled_total", "counter", "Streams ended by the client leaving.",
      s.streams_cancelled);
  out += "# HELP braid:runs Runs the server holds, by state.\n# TYPE braid:runs gauge\n";
  const std::pair<const char*, int> states[] = {{"queued", c.queued},
                                                {"running", c.running},
                                                {"done", c.done},
                                                {"failed", c.failed},
                                                {"cancelled", c.cancelled}};
  for (const auto& [state, n] : states)
    out += std::string("braid:runs{state=\"") + state + "\"} " + std::to_string(n) + "\n";
  return out;
}

// Unhealthy when an embedded engine's loop stopped, or when no engine at
// all can take work (a remote one that is down is routed around).
http::Response Health(const std::vector<Engine*>& engines) {
  int alive = 0;
  for (Engine* e : engines) {
    if (e->model() && !e->alive()) return http::JsonError(503, "an embedded engine stopped");
    alive += e->alive();
  }
  if (alive == 0) return http::JsonError(503, "no engine is reachable");
  return http::JsonResponse(200, R"({"status":"ok"})");
}

// A key that may not see other clients gets its own client's series and
// the totals, no other client's name.
http::Response Metrics(const StatusSources& s, const http::Request& req) {
  http::Response r;
  r.content_type = "text/plain; version=0.0.4";
  std::vector<EngineStats> stats;
  for (Engine* e : s.engines) stats.push_back(e->stats());
  http::MetricsSnapshot snapshot = s.metrics->Snapshot();
  if (!http::SeesAll(req, s.keyed)) http::KeepOnlyClient(req.client, &snapshot, &stats);
  r.body = http::RenderPrometheus(snapshot, stats, s.model_name) +
           ServerMetrics(s.http_server->stats(), s.service->counts());
  return r;
}

// A reader gets figures at most half a second old; ?since=N: the samples
// after the N-th.
http::Response Stats(const StatusSources& s, const http::Request& r) {
  if (UnixNow() - s.history->last_time() > 0.5) SampleStats(s);
  uint64_t since = 0;
  if (auto it = r.query.find("since"); it != r.query.end()) {
    char* end = nullptr;
    since = std::strtoull(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end || it->second[0] == '-')
      return http::JsonError(400, "since: '" + it->second + "' is not a sample number", "",
                             "since");
  }
  // Another client's figures are left out unless the key may see them all.
  return http::JsonResponse(
      200, s.history->Json(since, http::SeesAll(r, s.keyed) ? nullptr : &r.client));
}

}  // namespace

void SampleStats(const StatusSources& s) {
  std::vector<EngineStats> stats;
  for (Engine* e : s.engines) stats.push_back(e->stats());
  const server::RunsService::Counts c = s.service->counts();
  s.history->Record(UnixNow(), stats, {c.queued, c.running, c.done, c.failed, c.cancelled});
}

void AddStatusRoutes(http::Router* router, const StatusSources* s) {
  router->Add("GET", "/health",
              [s](const http::Request&, const http::Params&) { return Health(s->engines); });
  router->Add("GET", "/metrics",
              [s](const http::Request& r, const http::Params&) { return Metrics(*s, r); });
  router->Add("GET", "/v1/stats",
              [s](const http::Request& r, const http::Params&) { return Stats(*s, r); });
}

}  // namespace braid::cli
