// braid serve: the HTTP server (docs/http-api.md). The listener starts first
// and answers /health with 503 while the model loads; then the OpenAI-
// compatible routes, the program routes and /metrics go live.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/stack.h"
#include "engine/system_probe.h"
#include "http/dashboard.h"
#include "http/metrics.h"
#include "http/openai_api.h"
#include "http/server.h"
#include "http/stats_history.h"
#include "server/runs_service.h"

namespace braid::cli {
namespace {

const char* kServeHelp =
    "usage: braid serve [options]\n"
    "\n"
    "Serves the model over HTTP: the OpenAI-compatible API (/v1/completions,\n"
    "/v1/chat/completions, /v1/models, /tokenize, /detokenize), Braid programs and\n"
    "DAGs (/v1/programs, /v1/dags, /v1/sessions, /v1/runs), /health, /metrics, the\n"
    "engines' figures over time (/v1/stats) and a live dashboard at /.\n"
    "Runs until SIGINT or SIGTERM: it then stops accepting, lets what runs finish for\n"
    "up to --drain-seconds, interrupts the rest and exits; interrupted runs stay\n"
    "resumable and a restarted server resumes them (one interrupted 3 times in a row\n"
    "without progress is failed instead, --max-attempts). A second signal exits at\n"
    "once. The API: docs/http-api.md.\n"
    "\n"
    "%s"
    "      --host ADDR         address to listen on (default 127.0.0.1)\n"
    "      --port N            port, 0..65535 (default 8080; 0: any free port, printed)\n"
    "      --api-key-file F    API keys, one per line: 'NAME KEY [weight=W] [role=admin]' or\n"
    "                          'KEY' (W: the client's share under --fair); every route but\n"
    "                          /health then needs 'Authorization: Bearer KEY', and each\n"
    "                          client sees only its own runs and sessions (admin: all)\n"
    "      --model-name NAME   the model's id in the OpenAI API (default: the file's name)\n"
    "      --cors-origin O     allow browser calls from origin O (default: no CORS)\n"
    "      --dashboard-dir D   serve the dashboard's files (index.html, app.js, style.css)\n"
    "                          from D instead of the copies built in\n"
    "      --max-programs N    programs and DAGs running at once, 1..4096 (default 16; each\n"
    "                          holds a thread while it waits for the model)\n"
    "      --max-programs-per-client N\n"
    "                          threads one client may hold at once, 1..4096 (default with\n"
    "                          --api-key-file: max-programs - max(1, max-programs/4), so\n"
    "                          another client's program always finds one; without keys:\n"
    "                          max-programs)\n"
    "      --run-mode M        how programs run their calls: dag (default: the runtime sees\n"
    "                          the program) or async (each call an independent request, as a\n"
    "                          request-level server sees an asynchronous client; a baseline)\n"
    "      --max-queued N      runs waiting for one of those threads, 0..100000 (default 256;\n"
    "                          beyond: 429)\n"
    "      --workers N         HTTP handler threads, 1..4096 (default 64)\n"
    "      --max-pending N     requests waiting for a handler thread, 1..100000 (default 256;\n"
    "                          beyond: 429)\n"
    "      --max-body-mb N     largest request body, 1..1024 MiB (default 16; beyond: 413)\n"
    "      --lua-memory-mb N   Lua memory cap per program, 1..65536 (default 256)\n"
    "      --lua-seconds S     time cap per program, 0.001..86400 (default 10): Lua code and\n"
    "                          the host calls it makes, not the waits for the model\n"
    "      --drain-seconds N   on SIGTERM/SIGINT, how long running requests may finish,\n"
    "                          0..3600 (default 10; 0: interrupt them at once)\n"
    "      --max-attempts N    a run started N times in a row without finishing a call\n"
    "                          (it crashed the server, or the server kept stopping under\n"
    "                          it) is failed instead of resumed, 0..1000 (default 3; 0: no\n"
    "                          limit)\n"
    "      --memory-mb N       bytes live programs, DAGs and sessions may hold together\n"
    "                          (their Lua heaps, values and results), 0..16777216 (default 0:\n"
    "                          40%% of the memory available at start); beyond: 429, or 413\n"
    "                          for a submission that could never fit\n"
    "      --client-memory-mb N  the same cap per client, 0..16777216 (default 0: half of\n"
    "                          --memory-mb with API keys, all of it without)\n";

std::atomic<bool> g_stop{false};
// The first signal asks for a graceful stop; a second one exits at once
// (_Exit is async-signal-safe; the run store's last committed transaction
// stands, and runs in flight resume on the next start).
extern "C" void OnStopSignal(int sig) {
  if (g_stop.exchange(true)) std::_Exit(128 + sig);
}

// Past the drain, how long the rest of the stop may take (interrupted
// programs returning, connections closing) before the process exits anyway.
constexpr double kStopGraceSeconds = 15;

std::string FileStem(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.size() > 5 && name.substr(name.size() - 5) == ".gguf") name.resize(name.size() - 5);
  return name;
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

}  // namespace

int ServeMain(const std::vector<std::string>& argv) {
  Args args(argv);
  if (args.Flag({"-h", "--help"})) {
    std::printf(kServeHelp, kStackHelp);
    return 0;
  }
  StackOptions so = ReadStackOptions(args);
  http::ServerOptions ho;
  ho.host = args.Str({"--host"}, "127.0.0.1");
  ho.port = static_cast<int>(args.Int({"--port"}, 8080, 0, 65535));
  const std::string key_file = args.Str({"--api-key-file"}, "");
  std::string model_name = args.Str({"--model-name"}, "");
  ho.cors_origin = args.Str({"--cors-origin"}, "");
  const std::string dashboard_dir = args.Str({"--dashboard-dir"}, "");
  for (const std::string& p : http::DashboardPaths()) ho.public_paths.push_back(p);
  server::RunsOptions runs;
  runs.max_programs = static_cast<int>(args.Int({"--max-programs"}, 16, 1, 4096));
  runs.max_queued = static_cast<size_t>(args.Int({"--max-queued"}, 256, 0, 100000));
  const std::string run_mode = args.Str({"--run-mode"}, "dag");
  if (run_mode == "async")
    runs.mode = rt::Mode::kBaselineAsync;
  else if (run_mode != "dag")
    args.Fail("option --run-mode: '" + run_mode + "' is not dag or async");
  const int per_client = static_cast<int>(args.Int({"--max-programs-per-client"}, 0, 1, 4096));
  const double drain_seconds = args.Num({"--drain-seconds"}, 10.0, 0.0, 3600.0);
  runs.max_attempts = static_cast<int>(args.Int({"--max-attempts"}, 3, 0, 1000));
  ho.workers = static_cast<int>(args.Int({"--workers"}, 64, 1, 4096));
  ho.max_pending = static_cast<size_t>(args.Int({"--max-pending"}, 256, 1, 100000));
  ho.max_body_bytes = static_cast<size_t>(args.Int({"--max-body-mb"}, 16, 1, 1024)) << 20;
  runs.lua_limits.memory_bytes = static_cast<size_t>(args.Int({"--lua-memory-mb"}, 256, 1, 65536))
                                 << 20;
  runs.lua_limits.cpu_seconds = args.Num({"--lua-seconds"}, 10.0, 0.001, 86400.0);
  runs.max_source_bytes = ho.max_body_bytes;
  runs.memory_bytes = static_cast<size_t>(args.Int({"--memory-mb"}, 0, 0, 16777216)) << 20;
  runs.client_memory_bytes = static_cast<size_t>(args.Int({"--client-memory-mb"}, 0, 0, 16777216))
                             << 20;
  if (std::string e = args.Error(); !e.empty()) {
    std::fprintf(stderr, "braid serve: %s\n", e.c_str());
    return 2;
  }
  if (!key_file.empty()) {
    auto keys = http::ReadApiKeys(key_file);
    if (!keys.ok()) {
      std::fprintf(stderr, "braid serve: %s\n", keys.status().message().c_str());
      return 2;
    }
    ho.api_keys = std::move(keys->keys);
    ho.admin_clients = std::move(keys->admins);
    // A share given by --client-weights overrides the file's.
    for (const auto& [name, weight] : keys->weights) so.client_weights.emplace(name, weight);
    if (!keys->weights.empty() && !so.fair)
      std::fprintf(stderr, "braid serve: note: the key file's weights apply only with --fair\n");
  }
  // The memory budget's defaults, from what is available before the model
  // and its KV cache take their share.
  if (runs.memory_bytes == 0) runs.memory_bytes = AvailableMemoryBytes() / 10 * 4;
  if (runs.client_memory_bytes == 0)
    runs.client_memory_bytes = ho.api_keys.empty() ? runs.memory_bytes : runs.memory_bytes / 2;
  std::fprintf(stderr, "braid serve: live runs may hold %zu MB, %zu MB per client\n",
               runs.memory_bytes >> 20, runs.client_memory_bytes >> 20);
  if (model_name.empty()) model_name = FileStem(so.model.path);

  // The listener first: /health says 503 while the model loads.
  http::Router loading;
  auto not_yet = [](const http::Request&, const http::Params&) {
    http::Response r = http::JsonError(503, "the model is loading");
    r.headers.emplace_back("Retry-After", "1");
    return r;
  };
  loading.Add("GET", "/health", not_yet);
  auto server = http::Server::Start(ho, &loading);
  if (!server.ok()) {
    std::fprintf(stderr, "braid serve: %s\n", server.status().message().c_str());
    return 1;
  }
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGPIPE, SIG_IGN);
  std::fprintf(stderr, "braid serve: listening on http://%s:%d (loading %s)\n", ho.host.c_str(),
               (*server)->port(), so.model.path.c_str());

  auto opened = OpenStack(so);
  if (!opened.ok()) {
    std::fprintf(stderr, "braid serve: %s\n", opened.status().message().c_str());
    (*server)->Stop();
    return 1;
  }
  std::unique_ptr<Stack> stack = std::move(opened).value();
  std::fprintf(stderr, "braid serve: %s\n", stack->KvSummary().c_str());

  // The routes.
  http::Router router;
  std::vector<Engine*> engines;
  for (auto& e : stack->engines) engines.push_back(e.get());
  http::ServingMetrics metrics;
  http::OpenAiOptions oo;
  oo.model_name = model_name;
  oo.tokenizer = stack->tokenizer;
  oo.engines = engines;
  oo.metrics = &metrics;
  oo.placement = stack->options.placement;
  http::AddOpenAiRoutes(&router, std::make_shared<http::OpenAiService>(oo));
  runs.runtime = stack->runtime.get();
  // With keys, each client sees only what it made (admins see everything).
  const bool keyed = !ho.api_keys.empty();
  runs.keyed = keyed;
  // With keys, a reserve of threads no single client may take: another
  // client's program starts even while one client's programs are stuck.
  runs.max_programs_per_client =
      per_client > 0 ? per_client
      : keyed        ? std::max(1, runs.max_programs - std::max(1, runs.max_programs / 4))
                     : runs.max_programs;
  server::RunsService service(runs);
  service.AddRoutes(&router);
  // Unhealthy when an embedded engine's loop stopped, or when no engine at
  // all can take work (a remote one that is down is routed around).
  router.Add("GET", "/health", [&engines](const http::Request&, const http::Params&) {
    int alive = 0;
    for (Engine* e : engines) {
      if (e->model() && !e->alive()) return http::JsonError(503, "an embedded engine stopped");
      alive += e->alive();
    }
    if (alive == 0) return http::JsonError(503, "no engine is reachable");
    return http::JsonResponse(200, R"({"status":"ok"})");
  });
  http::Server* srv = server->get();
  // A key that may not see other clients gets its own client's series and
  // the totals, no other client's name.
  router.Add("GET", "/metrics", [&](const http::Request& req, const http::Params&) {
    http::Response r;
    r.content_type = "text/plain; version=0.0.4";
    std::vector<EngineStats> stats;
    for (Engine* e : engines) stats.push_back(e->stats());
    http::MetricsSnapshot snapshot = metrics.Snapshot();
    if (!http::SeesAll(req, keyed)) http::KeepOnlyClient(req.client, &snapshot, &stats);
    r.body = http::RenderPrometheus(snapshot, stats, model_name) +
             ServerMetrics(srv->stats(), service.counts());
    return r;
  });
  // The engines' figures once a second, for /v1/stats and the dashboard.
  std::vector<http::EngineLabel> labels;
  for (size_t i = 0; i < engines.size(); ++i) {
    const Model* m = engines[i]->model();
    labels.push_back(
        {i < stack->engine_names.size() ? stack->engine_names[i] : "engine" + std::to_string(i),
         m ? m->info().path : "", m ? m->info().device : "remote"});
  }
  http::StatsHistory history(model_name, std::move(labels));
  auto unix_now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  auto sample = [&] {
    std::vector<EngineStats> stats;
    for (Engine* e : engines) stats.push_back(e->stats());
    const server::RunsService::Counts c = service.counts();
    history.Record(unix_now(), stats, {c.queued, c.running, c.done, c.failed, c.cancelled});
  };
  sample();
  // A reader gets figures at most half a second old.
  router.Add("GET", "/v1/stats", [&](const http::Request& r, const http::Params&) {
    if (unix_now() - history.last_time() > 0.5) sample();
    uint64_t since = 0;
    if (auto it = r.query.find("since"); it != r.query.end()) {
      char* end = nullptr;
      since = std::strtoull(it->second.c_str(), &end, 10);
      if (it->second.empty() || *end || it->second[0] == '-')
        return http::JsonError(400, "since: '" + it->second + "' is not a sample number", "",
                               "since");
    }
    // Another client's figures are left out unless the key may see them all.
    return http::JsonResponse(200,
                              history.Json(since, http::SeesAll(r, keyed) ? nullptr : &r.client));
  });
  http::AddDashboardRoutes(&router, dashboard_dir);
  srv->SetRouter(&router);
  if (auto resumed = service.ResumeInterrupted(); !resumed.ok()) {
    std::fprintf(stderr, "braid serve: resuming interrupted runs: %s\n",
                 resumed.status().message().c_str());
  } else if (*resumed > 0) {
    std::fprintf(stderr, "braid serve: resumed %d interrupted run%s\n", *resumed,
                 *resumed == 1 ? "" : "s");
  }
  std::fprintf(stderr, "braid serve: ready on http://%s:%d (model '%s')\n", ho.host.c_str(),
               srv->port(), model_name.c_str());

  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (unix_now() - history.last_time() >= 0.95) sample();
  }
  // Stopping: nothing new comes in, what runs gets the drain time, the
  // rest is interrupted (detached runs stay resumable in the store). A
  // watchdog makes sure the process ends even if something does not return.
  std::fprintf(stderr,
               "braid serve: stopping (draining for up to %g s; a second signal exits at once)\n",
               drain_seconds);
  std::thread([limit = drain_seconds + kStopGraceSeconds] {
    std::this_thread::sleep_for(std::chrono::duration<double>(limit));
    std::fprintf(stderr, "braid serve: not stopped after %g s; exiting now\n", limit);
    std::_Exit(1);
  }).detach();
  srv->StopAccepting();
  service.BeginDrain();
  const auto drain_end =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(drain_seconds);
  auto busy = [&] {
    const http::Server::Stats st = srv->stats();
    return service.Running() > 0 || st.requests_running > 0 || st.streams_open > 0;
  };
  while (busy() && std::chrono::steady_clock::now() < drain_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (busy())
    std::fprintf(stderr, "braid serve: drain time over; interrupting %d program%s still running\n",
                 service.Running(), service.Running() == 1 ? "" : "s");
  srv->SetRouter(&loading);
  service.Stop();
  srv->Stop();
  std::fprintf(stderr, "braid serve: stopped\n");
  return 0;
}

}  // namespace braid::cli
