// The run routes (/v1/runs/...): the runs a client may see, newest first,
// live ones and those only the store holds; one run's status; cancelling
// one; its DAG as SVG or dot; a stream of its events.
#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "report/run_record.h"
#include "report/run_report.h"
#include "server/routes.h"
#include "server/runs_impl.h"

namespace braid::server {

using nlohmann::json;

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// GET /v1/runs's query: ?limit=N (1..10000, default 100) and ?result=false,
// which leaves out each run's result (a list polled often need not carry
// every run's output again); or the error answer.
std::optional<http::Response> ReadListQuery(const http::Request& r, int* limit, bool* with_result) {
  if (auto it = r.query.find("limit"); it != r.query.end()) {
    char* end = nullptr;
    const long v = std::strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end || v < 1 || v > 10000)
      return http::JsonError(400, "limit: must be an integer in [1, 10000]", "", "limit");
    *limit = static_cast<int>(v);
  }
  if (auto it = r.query.find("result"); it != r.query.end()) {
    if (it->second != "true" && it->second != "false")
      return http::JsonError(400, "result: true or false", "", "result");
    *with_result = it->second == "true";
  }
  return std::nullopt;
}

// The runs in memory that `r` may see, newest first.
std::vector<std::shared_ptr<Entry>> LiveRuns(RunsService::Impl& impl, const http::Request& r) {
  std::vector<std::shared_ptr<Entry>> live;
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    for (auto& [id, e] : impl.entries)
      if (impl.MaySee(r, e->client)) live.push_back(e);
  }
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return a->created_unix > b->created_unix; });
  return live;
}

// The store's runs that `r` may see (all of them for an admin or a server
// without keys), newest first, at most `limit` (0: all).
Result<std::vector<rt::RunRecord>> StoredRuns(RunsService::Impl& impl, const http::Request& r,
                                              int limit) {
  return http::SeesAll(r, impl.options.keyed) ? impl.options.runtime->StoredRuns(limit)
                                              : impl.options.runtime->StoredRunsOf(r.client, limit);
}

// GET /v1/runs: the caller's runs in memory, then older ones from the store
// (as report::RunRecordJson renders them).
http::Response ListRuns(RouteContext& c, const http::Request& r, const http::Params&) {
  int limit = 100;
  bool with_result = true;
  if (auto err = ReadListQuery(r, &limit, &with_result)) return *err;
  json runs = json::array();
  std::set<std::string> seen;
  for (auto& e : LiveRuns(*c.impl, r)) {
    if (static_cast<int>(runs.size()) >= limit) break;
    runs.push_back(c.impl->StatusJson(*e, false));
    if (!with_result) runs.back().erase("result");
    seen.insert(e->id);
  }
  if (auto stored = StoredRuns(*c.impl, r, limit); stored.ok()) {
    for (const rt::RunRecord& rec : *stored) {
      if (seen.count(rec.id) || static_cast<int>(runs.size()) >= limit) continue;
      if (!c.impl->MaySee(r, rec.owner)) continue;  // StoredRunsOf selected them; checked again
      runs.push_back(report::RunRecordJson(rec));
    }
  }
  return http::JsonResponse(200, Dump({{"runs", runs}}));
}

// GET /v1/runs/{id}: a run in memory with its nodes and variables, or its
// record in the store with its result.
http::Response GetRun(RouteContext& c, const http::Request& r, const http::Params& p) {
  const std::string& id = p.at("id");
  RunsService::Impl& impl = *c.impl;
  if (auto e = impl.Find(id)) {
    if (!impl.MaySee(r, e->client)) return http::JsonError(404, "no run '" + id + "'");
    return http::JsonResponse(200, Dump(impl.StatusJson(*e, true)));
  }
  auto stored = StoredRuns(impl, r, 0);
  if (stored.ok())
    for (const rt::RunRecord& rec : *stored) {
      if (rec.id != id || !impl.MaySee(r, rec.owner)) continue;
      json j = report::RunRecordJson(rec);
      // A finished run of an earlier server (or one no longer kept in
      // memory) still has its result.
      if (rec.state == "done" || rec.state == "failed") {
        auto result = impl.options.runtime->StoredValue(id, std::string(kResultKey));
        if (result.ok() && *result) {
          json value = json::parse(**result, nullptr, false);
          if (!value.is_discarded()) j["result"] = std::move(value);
        }
      }
      return http::JsonResponse(200, Dump(j));
    }
  return http::JsonError(404, "no run '" + id + "'");
}

// POST /v1/runs/{id}/cancel, DELETE /v1/runs/{id}.
http::Response Cancel(RouteContext& c, const http::Request& r, const http::Params& p) {
  const std::string& id = p.at("id");
  auto e = c.impl->FindFor(r, id);
  if (!e) return http::JsonError(404, "no live run '" + id + "'");
  c.impl->CancelRun(e);
  std::lock_guard<std::mutex> lock(e->mu);
  return http::JsonResponse(200, Dump({{"id", id}, {"state", e->state}}));
}

// GraphSvg's error as the answer, naming ?format=dot as the way around it.
http::Response GraphError(const Status& s) {
  const std::string message = s.message() + " (ask ?format=dot for the dot text)";
  switch (s.code()) {
    case StatusCode::kTooLarge:
      return http::JsonError(413, message);
    case StatusCode::kResourceExhausted:  // out of time: no Retry-After, it would be again
    case StatusCode::kCancelled:
      return http::JsonError(503, message);
    case StatusCode::kNotFound:
      return http::JsonError(501, message);
    default:
      return http::JsonError(500, message);
  }
}

// GET /v1/runs/{id}/graph: the DAG as SVG, or ?format=dot.
http::Response Graph(RouteContext& c, const http::Request& r, const http::Params& p) {
  const std::string& id = p.at("id");
  auto e = c.impl->FindFor(r, id);
  if (!e) return http::JsonError(404, "no run '" + id + "' in memory");
  http::Response res;
  if (auto f = r.query.find("format"); f != r.query.end() && f->second == "dot") {
    res.content_type = "text/vnd.graphviz";
    res.body = e->run->ToDot();
    return res;
  }
  // Graphviz within its limits (report::DotLimits: 10 s, 4 MiB of dot text,
  // 32 MiB of SVG), and stopped should the client go.
  const auto gone = r.client_gone;
  auto svg =
      report::GraphSvg(*e->run, report::DotLimits(), [gone] { return gone && gone->gone(); });
  if (!svg.ok()) return GraphError(svg.status());
  res.content_type = "image/svg+xml";
  res.body = std::move(*svg);
  return res;
}

// GET /v1/runs/{id}/events: the run's state now, then its changes as
// server-sent events until it ends.
http::Response Events(RouteContext& c, const http::Request& req, const http::Params& p) {
  const std::string& id = p.at("id");
  auto e = c.impl->FindFor(req, id);
  if (!e) return http::JsonError(404, "no run '" + id + "' in memory");
  auto stream = std::make_shared<http::EventStream>();
  http::Response r;
  r.content_type = "text/event-stream";
  r.stream = stream;
  // The current state first, then changes; a finished run ends at once.
  json now = c.impl->StatusJson(*e, false);
  now["type"] = "run";
  stream->Send(http::SseEvent(Dump(now)));
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->Finished()) {
    stream->Close();
  } else {
    e->watchers.push_back(stream);
  }
  return r;
}

}  // namespace

void AddRunRoutes(const std::weak_ptr<RunsService::Impl>& service, http::Router* router) {
  router->Add("GET", "/v1/runs", Route(service, kNoNeed, ListRuns));
  router->Add("GET", "/v1/runs/{id}", Route(service, kNoNeed, GetRun));
  router->Add("DELETE", "/v1/runs/{id}", Route(service, kNoNeed, Cancel));
  router->Add("POST", "/v1/runs/{id}/cancel", Route(service, kNoNeed, Cancel));
  router->Add("GET", "/v1/runs/{id}/graph", Route(service, kNoNeed, Graph));
  router->Add("GET", "/v1/runs/{id}/events", Route(service, kNoNeed, Events));
}

}  // namespace braid::server
