// The routes of braid serve that tell the server's state rather than run
// work: /health, /metrics (Prometheus) and /v1/stats (the engines' figures
// over time, for the dashboard). docs/http-api.md has their answers.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"
#include "http/http_types.h"
#include "http/metrics.h"
#include "http/server.h"
#include "http/stats_history.h"
#include "server/runs_service.h"

namespace braid::cli {

// What the status routes read; none of it owned. It must outlive the router
// the routes are added to.
struct StatusSources {
  std::vector<Engine*> engines;
  http::ServingMetrics* metrics = nullptr;
  http::StatsHistory* history = nullptr;
  server::RunsService* service = nullptr;
  http::Server* http_server = nullptr;
  // The server has API keys: a key that may not see other clients gets its
  // own client's figures and the totals, no other client's name.
  bool keyed = false;
  std::string model_name;
};

// Records one sample of the engines' figures and the runs' states in the
// history (once a second while serving; again for a reader of /v1/stats
// when the last is older than half a second). Any thread.
void SampleStats(const StatusSources& s);

// GET /health, GET /metrics, GET /v1/stats.
void AddStatusRoutes(http::Router* router, const StatusSources* s);

}  // namespace braid::cli
