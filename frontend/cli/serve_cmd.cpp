// braid serve: the HTTP server (docs/http-api.md). The listener starts first
// and answers /health with 503 while the model loads; then the OpenAI-
// compatible routes, the program routes and /metrics go live.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/stack.h"
#include "cli/status_routes.h"
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

// braid serve's options, parsed.
struct ServeOptions {
  StackOptions stack;
  http::ServerOptions http_options;
  server::RunsOptions runs;
  std::string key_file;
  std::string model_name;     // the model's id in the OpenAI API
  std::string dashboard_dir;  // "": the files built in
  int per_client = 0;         // --max-programs-per-client; 0: from max_programs
  double drain_seconds = 10;
};

// The command line into *o. Returns the exit status when braid serve should
// exit now (help, a bad option), or -1 to go on.
int ReadServeOptions(const std::vector<std::string>& argv, ServeOptions* o) {
  Args args(argv);
  if (args.Flag({"-h", "--help"})) {
    std::printf(kServeHelp, kStackHelp);
    return 0;
  }
  o->stack = ReadStackOptions(args);
  http::ServerOptions& ho = o->http_options;
  server::RunsOptions& runs = o->runs;
  ho.host = args.Str({"--host"}, "127.0.0.1");
  ho.port = static_cast<int>(args.Int({"--port"}, 8080, 0, 65535));
  o->key_file = args.Str({"--api-key-file"}, "");
  o->model_name = args.Str({"--model-name"}, "");
  ho.cors_origin = args.Str({"--cors-origin"}, "");
  o->dashboard_dir = args.Str({"--dashboard-dir"}, "");
  for (const std::string& p : http::DashboardPaths()) ho.public_paths.push_back(p);
  runs.max_programs = static_cast<int>(args.Int({"--max-programs"}, 16, 1, 4096));
  runs.max_queued = static_cast<size_t>(args.Int({"--max-queued"}, 256, 0, 100000));
  const std::string run_mode = args.Str({"--run-mode"}, "dag");
  if (run_mode == "async")
    runs.mode = rt::Mode::kBaselineAsync;
  else if (run_mode != "dag")
    args.Fail("option --run-mode: '" + run_mode + "' is not dag or async");
  o->per_client = static_cast<int>(args.Int({"--max-programs-per-client"}, 0, 1, 4096));
  o->drain_seconds = args.Num({"--drain-seconds"}, 10.0, 0.0, 3600.0);
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
  return -1;
}

// What the options leave to be worked out: the API keys (their weights join
// --client-weights), the memory budget's defaults from what is available
// before the model and its KV cache take their share, the model's name.
// Returns false (said on stderr) when the key file cannot be read.
bool CompleteServeOptions(ServeOptions* o) {
  server::RunsOptions& runs = o->runs;
  if (!o->key_file.empty()) {
    auto keys = http::ReadApiKeys(o->key_file);
    if (!keys.ok()) {
      std::fprintf(stderr, "braid serve: %s\n", keys.status().message().c_str());
      return false;
    }
    o->http_options.api_keys = std::move(keys->keys);
    o->http_options.admin_clients = std::move(keys->admins);
    // A share given by --client-weights overrides the file's.
    for (const auto& [name, weight] : keys->weights) o->stack.client_weights.emplace(name, weight);
    if (!keys->weights.empty() && !o->stack.fair)
      std::fprintf(stderr, "braid serve: note: the key file's weights apply only with --fair\n");
  }
  if (runs.memory_bytes == 0) runs.memory_bytes = AvailableMemoryBytes() / 10 * 4;
  if (runs.client_memory_bytes == 0)
    runs.client_memory_bytes =
        o->http_options.api_keys.empty() ? runs.memory_bytes : runs.memory_bytes / 2;
  std::fprintf(stderr, "braid serve: live runs may hold %zu MB, %zu MB per client\n",
               runs.memory_bytes >> 20, runs.client_memory_bytes >> 20);
  if (o->model_name.empty()) o->model_name = FileStem(o->stack.model.path);
  // With keys, each client sees only what it made (admins see everything),
  // and a reserve of threads no single client may take: another client's
  // program starts even while one client's programs are stuck.
  runs.keyed = !o->http_options.api_keys.empty();
  runs.max_programs_per_client =
      o->per_client > 0 ? o->per_client
      : runs.keyed      ? std::max(1, runs.max_programs - std::max(1, runs.max_programs / 4))
                        : runs.max_programs;
  return true;
}

// The listener, before the model loads: /health says 503 meanwhile, from
// the `loading` router (which must outlive the server).
Result<std::unique_ptr<http::Server>> StartListener(const ServeOptions& o, http::Router* loading) {
  loading->Add("GET", "/health", [](const http::Request&, const http::Params&) {
    http::Response r = http::JsonError(503, "the model is loading");
    r.headers.emplace_back("Retry-After", "1");
    return r;
  });
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<http::Server> server,
                         http::Server::Start(o.http_options, loading));
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGPIPE, SIG_IGN);
  std::fprintf(stderr, "braid serve: listening on http://%s:%d (loading %s)\n",
               o.http_options.host.c_str(), server->port(), o.stack.model.path.c_str());
  return server;
}

// What serves once the model is loaded: the services, what the status
// routes read, and the router over them all.
struct Serving {
  std::vector<Engine*> engines;
  http::ServingMetrics metrics;
  std::unique_ptr<server::RunsService> service;
  std::unique_ptr<http::StatsHistory> history;
  StatusSources status;
  http::Router router;
};

// The engines as /v1/stats and the dashboard name them.
std::vector<http::EngineLabel> EngineLabels(const Stack& stack) {
  std::vector<http::EngineLabel> labels;
  for (size_t i = 0; i < stack.engines.size(); ++i) {
    const Model* m = stack.engines[i]->model();
    labels.push_back(
        {i < stack.engine_names.size() ? stack.engine_names[i] : "engine" + std::to_string(i),
         m ? m->info().path : "", m ? m->info().device : "remote"});
  }
  return labels;
}

// The routes: the OpenAI-compatible API, programs, DAGs, sessions and runs,
// the status routes and the dashboard.
std::unique_ptr<Serving> OpenServing(ServeOptions& o, Stack& stack, http::Server* srv) {
  auto s = std::make_unique<Serving>();
  for (auto& e : stack.engines) s->engines.push_back(e.get());
  http::OpenAiOptions oo;
  oo.model_name = o.model_name;
  oo.tokenizer = stack.tokenizer;
  oo.engines = s->engines;
  oo.metrics = &s->metrics;
  oo.placement = stack.runtime->placement();
  http::AddOpenAiRoutes(&s->router, std::make_shared<http::OpenAiService>(oo));
  o.runs.runtime = stack.runtime.get();
  s->service = std::make_unique<server::RunsService>(o.runs);
  s->service->AddRoutes(&s->router);
  // The engines' figures once a second, for /v1/stats and the dashboard.
  s->history = std::make_unique<http::StatsHistory>(o.model_name, EngineLabels(stack));
  s->status = {s->engines, &s->metrics,  s->history.get(), s->service.get(),
               srv,        o.runs.keyed, o.model_name};
  SampleStats(s->status);
  AddStatusRoutes(&s->router, &s->status);
  http::AddDashboardRoutes(&s->router, o.dashboard_dir);
  return s;
}

// Serves until SIGINT or SIGTERM, sampling the engines' figures each second.
void ServeUntilSignal(Serving& s) {
  auto unix_now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (unix_now() - s.history->last_time() >= 0.95) SampleStats(s.status);
  }
}

// Stopping: nothing new comes in, what runs gets the drain time, the rest
// is interrupted (detached runs stay resumable in the store). A watchdog
// makes sure the process ends even if something does not return.
void StopServing(Serving& s, http::Server* srv, http::Router* loading, double drain_seconds) {
  std::fprintf(stderr,
               "braid serve: stopping (draining for up to %g s; a second signal exits at once)\n",
               drain_seconds);
  std::thread([limit = drain_seconds + kStopGraceSeconds] {
    std::this_thread::sleep_for(std::chrono::duration<double>(limit));
    std::fprintf(stderr, "braid serve: not stopped after %g s; exiting now\n", limit);
    std::_Exit(1);
  }).detach();
  srv->StopAccepting();
  server::RunsService& service = *s.service;
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
  srv->SetRouter(loading);
  service.Stop();
  srv->Stop();
  std::fprintf(stderr, "braid serve: stopped\n");
}

// The runs a stopped server left behind, resumed (or failed, or closed).
void ResumeRuns(server::RunsService& service) {
  if (auto resumed = service.ResumeInterrupted(); !resumed.ok()) {
    std::fprintf(stderr, "braid serve: resuming interrupted runs: %s\n",
                 resumed.status().message().c_str());
  } else if (*resumed > 0) {
    std::fprintf(stderr, "braid serve: resumed %d interrupted run%s\n", *resumed,
                 *resumed == 1 ? "" : "s");
  }
}

}  // namespace

int ServeMain(const std::vector<std::string>& argv) {
  ServeOptions o;
  if (int rc = ReadServeOptions(argv, &o); rc >= 0) return rc;
  if (!CompleteServeOptions(&o)) return 2;
  http::Router loading;
  auto server = StartListener(o, &loading);
  if (!server.ok()) {
    std::fprintf(stderr, "braid serve: %s\n", server.status().message().c_str());
    return 1;
  }
  http::Server* srv = server->get();
  auto opened = OpenStack(o.stack);
  if (!opened.ok()) {
    std::fprintf(stderr, "braid serve: %s\n", opened.status().message().c_str());
    srv->Stop();
    return 1;
  }
  std::unique_ptr<Stack> stack = std::move(opened).value();
  std::fprintf(stderr, "braid serve: %s\n", stack->KvSummary().c_str());
  std::unique_ptr<Serving> serving = OpenServing(o, *stack, srv);
  srv->SetRouter(&serving->router);
  ResumeRuns(*serving->service);
  std::fprintf(stderr, "braid serve: ready on http://%s:%d (model '%s')\n",
               o.http_options.host.c_str(), srv->port(), o.model_name.c_str());
  ServeUntilSignal(*serving);
  StopServing(*serving, srv, &loading, o.drain_seconds);
  return 0;
}

}  // namespace braid::cli
