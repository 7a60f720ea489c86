// braid runs: the runs recorded in a run store (newest first), one run's
// nodes and values, and removing runs. A run recorded as running whose store
// can be opened is shown as interrupted (runtime.h: RunRecord).
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "report/run_record.h"
#include "runtime/runtime.h"

namespace braid::cli {

std::string DefaultDb() {
  const char* home = std::getenv("HOME");
  if (!home || !*home) return "";
  return std::string(home) + "/.cache/braid/runs.db";
}

namespace {

const char* kRunsHelp =
    "usage: braid runs [--db PATH] [-n N] [--json]      the runs of a store, newest first\n"
    "       braid runs show ID [--db PATH] [--json]     one run: its state, totals, nodes and "
    "values\n"
    "       braid runs rm ID [ID...] [--db PATH]        remove runs (calls, values, events)\n"
    "  --db PATH   the run store (default ~/.cache/braid/runs.db, as braid run)\n"
    "  -n N        at most N runs, 1..1000000 (default 20)\n"
    "  --json      JSON instead of a table\n"
    "A run recorded as running is listed as interrupted: a live run holds its\n"
    "store, so while one runs, this command waits for it and then says the store\n"
    "is in use. Resume an interrupted run with braid run --resume ID SCRIPT.\n";

std::string LocalTime(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string Duration(const rt::RunRecord& r) {
  if (r.finished_unix <= 0) return "-";
  char buf[32];
  // The time between a kill and its resume is not the run's.
  std::snprintf(buf, sizeof buf, "%.1f s", report::RunSeconds(r));
  return buf;
}

std::string Joined(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

// At most n bytes of s (on a UTF-8 boundary), with "..." when cut.
std::string Clip(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t k = n;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return s.substr(0, k) + "...";
}

void PrintJson(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

int List(const std::string& db, int limit, bool json) {
  auto runs = rt::ListStoredRuns(db, limit);
  if (!runs.ok() && runs.status().code() == StatusCode::kNotFound) {
    if (json) {
      PrintJson(nlohmann::json::array());
    } else {
      std::printf("no runs recorded (no store at %s)\n", db.c_str());
    }
    return 0;
  }
  if (!runs.ok()) {
    std::fprintf(stderr, "braid runs: %s\n", runs.status().message().c_str());
    return 1;
  }
  if (json) {
    nlohmann::json a = nlohmann::json::array();
    for (const rt::RunRecord& r : *runs) a.push_back(report::RunRecordJson(r));
    PrintJson(a);
    return 0;
  }
  std::printf("%-28s %-11s %-19s %9s %7s %9s  %s\n", "id", "state", "started", "duration", "nodes",
              "tokens", "program [args]");
  for (const rt::RunRecord& r : *runs) {
    const std::string program = std::filesystem::path(r.program).filename().string();
    const std::string nodes = std::to_string(r.nodes_done) +
                              (r.nodes_failed ? "+" + std::to_string(r.nodes_failed) + "!" : "");
    std::printf("%-28s %-11s %-19s %9s %7s %9lld  %s%s%s\n", r.id.c_str(), r.state.c_str(),
                LocalTime(r.started_unix).c_str(), Duration(r).c_str(), nodes.c_str(),
                static_cast<long long>(r.prompt_tokens + r.generated_tokens), program.c_str(),
                r.args.empty() ? "" : " ", Clip(Joined(r.args), 60).c_str());
  }
  return 0;
}

int Show(const std::string& db, const std::string& id, bool json) {
  std::vector<rt::RunNodeRecord> nodes;
  auto r = rt::GetStoredRun(db, id, &nodes);
  if (!r.ok()) {
    std::fprintf(stderr, "braid runs: %s\n", r.status().message().c_str());
    return 1;
  }
  if (json) {
    nlohmann::json j = report::RunRecordJson(*r);
    nlohmann::json a = nlohmann::json::array();
    for (const rt::RunNodeRecord& n : nodes)
      a.push_back({{"function", n.function}, {"outputs", n.outputs}});
    j["nodes"] = a;
    PrintJson(j);
    return 0;
  }
  std::printf("run %s: %s\n  program %s%s%s\n  started %s, duration %s\n", r->id.c_str(),
              r->state.c_str(), r->program.c_str(), r->args.empty() ? "" : ", args ",
              Joined(r->args).c_str(), LocalTime(r->started_unix).c_str(), Duration(*r).c_str());
  std::printf("  nodes %d done, %d failed; tokens: %lld prompt (%lld cached), %lld generated\n",
              r->nodes_done, r->nodes_failed, static_cast<long long>(r->prompt_tokens),
              static_cast<long long>(r->cached_tokens),
              static_cast<long long>(r->generated_tokens));
  if (!r->error.empty()) std::printf("  error: %s\n", r->error.c_str());
  for (size_t i = 0; i < nodes.size(); ++i) {
    // "call N", not "#N": the live view's #N is a node id, joins included.
    std::printf("call %zu: %s\n", i + 1, nodes[i].function.c_str());
    for (const auto& [name, value] : nodes[i].outputs)
      std::printf("  %s = %s\n", name.c_str(), Clip(value, 200).c_str());
  }
  return 0;
}

}  // namespace

int RunsMain(const std::vector<std::string>& argv) {
  Args args(argv);
  if (args.Flag({"-h", "--help"})) {
    std::printf("%s", kRunsHelp);
    return 0;
  }
  const std::string db = args.Str({"--db"}, DefaultDb());
  const int limit = static_cast<int>(args.Int({"-n"}, 20, 1, 1000000));
  const bool json = args.Flag({"--json"});
  std::vector<std::string> pos = args.Positional();
  if (std::string e = args.Error(); !e.empty()) {
    std::fprintf(stderr, "braid runs: %s\n", e.c_str());
    return 2;
  }
  if (db.empty()) {
    std::fprintf(stderr, "braid runs: no run store: HOME is not set; give --db PATH\n");
    return 2;
  }
  if (pos.empty()) return List(db, limit, json);
  const std::string verb = pos[0];
  pos.erase(pos.begin());
  if (verb == "show") {
    if (pos.size() != 1) {
      std::fprintf(stderr, "braid runs show: give one run id, got %zu\n", pos.size());
      return 2;
    }
    return Show(db, pos[0], json);
  }
  if (verb == "rm") {
    if (pos.empty()) {
      std::fprintf(stderr, "braid runs rm: give the ids of the runs to remove\n");
      return 2;
    }
    int rc = 0;
    for (const std::string& id : pos) {
      if (Status s = rt::DeleteStoredRun(db, id); !s.ok()) {
        std::fprintf(stderr, "braid runs rm: %s\n", s.message().c_str());
        rc = 1;
      }
    }
    return rc;
  }
  std::fprintf(stderr, "braid runs: unknown subcommand '%s' (show ID, rm ID...)\n", verb.c_str());
  return 2;
}

}  // namespace braid::cli
