// braid run: runs a Lua program (apps/*/app.lua) on embedded engines.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/file_util.h"
#include "cli/stack.h"
#include "engine/engine.h"
#include "engine/system_probe.h"
#include "lua/driver.h"
#include "lua/live_view.h"
#include "report/run_report.h"
#include "runtime/runtime.h"

namespace braid::cli {
using report::WriteGraph;
namespace {

const char* kRunHelp =
    "usage: braid run [options] SCRIPT.lua [ARGS...]\n"
    "\n"
    "Runs a Braid Lua program; its return value goes to stdout (strings as is,\n"
    "tables as JSON), the live view and braid.log lines to stderr.\n"
    "\n"
    "%s"
    "      --mode M            dag (default): goals, task groups, prefix sharing;\n"
    "                          baseline: one blocking FCFS request per call, one at a time;\n"
    "                          baseline-async: one FCFS request per call, sent when its inputs are "
    "ready\n"
    "      --rtt-ms N          added client round trip per call, 0..600000 (baseline comparisons)\n"
    "      --graph PATH        write the DAG: .dot as is, .svg/.png/.pdf through Graphviz 'dot'\n"
    "      --json              print {run_id, result, nodes: [...]} as JSON; on failure\n"
    "                          {run_id, result: null, error, nodes: [...]} (exit status 1);\n"
    "                          a node with select outputs has scores: {output: {choice: logprob}}\n"
    "      --resume RUN_ID     resume a stored run: finished calls are not recomputed\n"
    "      --on-return W       work left when the program returns (coroutines not joined,\n"
    "                          calls nobody read): wait (default) finishes it; cancel drops\n"
    "                          it; either way what is dropped is named on stderr\n"
    "      --strict-deadlines  exit with status 3 when a node missed its deadline (misses\n"
    "                          are reported on stderr either way)\n"
    "  -q, --quiet             no live view or progress lines\n"
    "      --lua-memory-mb N   Lua memory cap, 1..65536 (default 256)\n"
    "      --lua-seconds S     the script's time cap, 0.001..86400 (default 10): Lua code and\n"
    "                          the host calls it makes, not the waits for the model\n"
    "      --lua-instructions N  Lua instruction cap, 0..10^15 (default 0: none)\n"
    "\n"
    "The script must be a regular file of at most 16 MiB.\n";

constexpr long long kMaxLuaInstructions = 1000000000000000LL;

// Options of braid run that take a value, besides the stack's (everything
// before the script is ours).
const std::set<std::string> kRunValueOptions = {
    "--mode",      "--rtt-ms",        "--graph",       "--resume",
    "--on-return", "--lua-memory-mb", "--lua-seconds", "--lua-instructions"};

bool TakesValue(const std::string& option) {
  return kRunValueOptions.count(option) > 0 ||
         std::find(kStackValueOptions.begin(), kStackValueOptions.end(), option) !=
             kStackValueOptions.end();
}

std::atomic<bool> g_interrupt{false};

extern "C" void OnSigint(int) {
  if (g_interrupt.exchange(true)) std::_Exit(130);  // second Ctrl-C: leave now
}

}  // namespace

int RunMain(const std::vector<std::string>& argv) {
  // Our options come before the script; everything after it is the app's.
  size_t script_at = argv.size();
  for (size_t i = 0; i < argv.size(); ++i) {
    if (TakesValue(argv[i])) {
      ++i;
      continue;
    }
    if (argv[i].empty() || argv[i][0] != '-') {
      script_at = i;
      break;
    }
  }
  std::vector<std::string> ours(argv.begin(), argv.begin() + std::min(script_at, argv.size()));
  Args args(ours);
  if (args.Flag({"-h", "--help"})) {
    std::printf(kRunHelp, kStackHelp);
    return 0;
  }
  if (script_at >= argv.size()) {
    std::fprintf(stderr, "braid run: give a script: braid run [options] SCRIPT.lua [ARGS...]\n");
    return 2;
  }
  const std::string script = argv[script_at];
  std::vector<std::string> app_args(argv.begin() + script_at + 1, argv.end());

  StackOptions so = ReadStackOptions(args);
  std::string mode = args.Str({"--mode"}, "dag");
  int rtt_ms = static_cast<int>(args.Int({"--rtt-ms"}, 0, 0, 600000));
  std::string graph = args.Str({"--graph"}, "");
  bool json = args.Flag({"--json"});
  const std::string db = so.db;
  // Absent and empty differ: `--resume ""` (an unset variable in a script)
  // must not quietly start a fresh run.
  const bool resuming = args.Has({"--resume"});
  std::string resume = args.Str({"--resume"}, "");
  if (resuming && resume.empty()) args.Fail("option --resume: the run id is empty");
  bool quiet = args.Flag({"-q", "--quiet"});
  const std::string on_return = args.Str({"--on-return"}, "wait");
  const bool strict_deadlines = args.Flag({"--strict-deadlines"});
  lua::DriverOptions dopts;
  // The Lua limits have no "off" value here: 0, negative or NaN would lift a
  // cap of the sandbox without saying so.
  dopts.limits.memory_bytes = static_cast<size_t>(args.Int({"--lua-memory-mb"}, 256, 1, 65536))
                              << 20;
  dopts.limits.cpu_seconds = args.Num({"--lua-seconds"}, 10.0, 0.001, 86400.0);
  dopts.limits.max_instructions =
      static_cast<uint64_t>(args.Int({"--lua-instructions"}, 0, 0, kMaxLuaInstructions));
  if (std::string e = args.Error(); !e.empty()) {
    std::fprintf(stderr, "braid run: %s\n", e.c_str());
    return 2;
  }
  if (on_return != "wait" && on_return != "cancel") {
    std::fprintf(stderr, "braid run: --on-return must be wait or cancel, got '%s'\n",
                 on_return.c_str());
    return 2;
  }
  dopts.on_return = on_return == "wait" ? lua::DriverOptions::OnReturn::kWait
                                        : lua::DriverOptions::OnReturn::kCancel;
  if (mode != "dag" && mode != "baseline" && mode != "baseline-async") {
    std::fprintf(stderr, "braid run: --mode must be dag, baseline or baseline-async, got '%s'\n", mode.c_str());
    return 2;
  }
  std::string source;
  if (Status s = ReadRegularFile(script, kMaxInputFileBytes, &source); !s.ok()) {
    std::fprintf(stderr, "braid run: script: %s\n", s.message().c_str());
    return 2;
  }
  // A program that does not compile fails before the model loads and
  // before a run is recorded.
  if (Status s = lua::CheckSyntax(script, source, dopts.limits); !s.ok()) {
    std::fprintf(stderr, "braid: %s\n", s.message().c_str());
    return 1;
  }
  if (!resume.empty() && db.empty()) {
    std::fprintf(stderr, "braid run: --resume needs the run store (--db)\n");
    return 2;
  }
  if (mode != "dag" && !args.Has({"--policy"})) so.policy = "fcfs";
  auto opened = OpenStack(so);
  if (!opened.ok()) {
    std::fprintf(stderr, "braid: %s\n", opened.status().message().c_str());
    return 1;
  }
  std::unique_ptr<Stack> stack = std::move(opened).value();
  rt::RunOptions runo;
  // The absolute path, so that a resume from another directory (or through
  // another relative path) names the same program.
  std::error_code path_ec;
  std::filesystem::path absolute = std::filesystem::weakly_canonical(script, path_ec);
  runo.program = path_ec ? script : absolute.string();
  runo.program_hash = rt::ProgramHash(source);
  runo.args = app_args;
  runo.mode = mode == "baseline"         ? rt::Mode::kBaseline
              : mode == "baseline-async" ? rt::Mode::kBaselineAsync
                                         : rt::Mode::kDag;
  runo.rtt_ms = rtt_ms;
  runo.resume_id = resume;
  auto started = stack->runtime->StartRun(runo);
  if (!started.ok()) {
    std::fprintf(stderr, "braid: %s\n", started.status().message().c_str());
    return 1;
  }
  std::shared_ptr<rt::Run> run = *started;
  if (const std::string w = run->resume_warning(); !w.empty())
    std::fprintf(stderr, "braid run: warning: %s\n", w.c_str());
  if (!quiet) std::fprintf(stderr, "braid: %s\n", stack->KvSummary().c_str());
  // The run id even with -q: it is what --resume and braid runs take.
  if (!db.empty())
    std::fprintf(stderr, "braid: run %s%s (store: %s)\n", run->id().c_str(),
                 resume.empty() ? "" : ", resumed", db.c_str());

  lua::LiveViewOptions vo;
  vo.tty = isatty(2) != 0;
  vo.progress = !quiet;
  vo.program = script;
  auto view = std::make_unique<lua::LiveView>(*run, vo);
  dopts.log = [&view](std::string_view line) { view->Log(line); };
  dopts.interrupt = &g_interrupt;
  dopts.script_dir = std::filesystem::path(script).parent_path().string();
  if (dopts.script_dir.empty()) dopts.script_dir = ".";
  auto old_handler = std::signal(SIGINT, OnSigint);

  auto t0 = std::chrono::steady_clock::now();
  auto result = lua::RunProgram(*run, script, source, app_args, dopts);
  double elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::signal(SIGINT, old_handler);
  run->Cancel();  // nodes nobody waits for any more (abandoned coroutines, errors)
  view->Stop();
  // Interrupted (Ctrl-C): the run stays unfinished in the store, where it
  // reads "interrupted" and resumes.
  const bool interrupted = !result.ok() && result.status().code() == StatusCode::kCancelled;
  if (!interrupted) run->Finish(result.ok() ? Status::Ok() : result.status());
  if (!graph.empty()) WriteGraph(*run, graph);
  if (const std::string spec = stack->SpecSummary(); !spec.empty() && !quiet)
    std::fprintf(stderr, "braid: %s\n", spec.c_str());

  // --json: {run_id, program, mode, elapsed_ms, result | error, nodes}.
  auto json_out = [&] {
    nlohmann::json out;
    out["run_id"] = run->id();
    out["program"] = script;
    out["mode"] = mode;
    out["elapsed_ms"] = elapsed_ms;
    return out;
  };
  auto print_json = [&](nlohmann::json out) {
    out["nodes"] = report::NodesJson(*run);
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    std::fflush(stdout);
  };
  if (!result.ok()) {
    std::fprintf(stderr, "braid: %s\n", result.status().message().c_str());
    if (json) {
      nlohmann::json out = json_out();
      out["result"] = nullptr;
      out["error"] = result.status().message();
      print_json(std::move(out));
    }
    // After an interrupt or an error alike: a resume replays the calls
    // that finished (the script may be fixed in between).
    if (!db.empty())
      std::fprintf(stderr, "braid: resume with: braid run --resume %s %s\n", run->id().c_str(), script.c_str());
    return result.status().code() == StatusCode::kCancelled ? 130 : 1;
  }
  // Deadlines: every miss on stderr; with --strict-deadlines in the exit status.
  int missed = 0;
  for (const auto& n : run->Nodes()) {
    if (!n.deadline_met || *n.deadline_met) continue;
    ++missed;
    std::fprintf(
        stderr, "braid: %s#%llu missed its deadline: due at %.0f ms, %s\n", n.label.c_str(),
        static_cast<unsigned long long>(n.id), *n.deadline_ms,
        n.end_ms >= 0
            ? ("finished at " + std::to_string(static_cast<long>(n.end_ms)) + " ms").c_str()
            : "failed");
  }
  const lua::ProgramResult& r = *result;
  if (json) {
    nlohmann::json out = json_out();
    if (r.kind == lua::ProgramResult::Kind::kString) {
      out["result"] = r.text;
    } else if (r.kind == lua::ProgramResult::Kind::kJson) {
      out["result"] = nlohmann::json::parse(r.text, nullptr, false);
    } else {
      out["result"] = nullptr;
    }
    print_json(std::move(out));
  } else if (r.kind == lua::ProgramResult::Kind::kString) {
    std::fwrite(r.text.data(), 1, r.text.size(), stdout);
    if (r.text.empty() || r.text.back() != '\n') std::fputc('\n', stdout);
  } else if (r.kind == lua::ProgramResult::Kind::kJson) {
    auto j = nlohmann::json::parse(r.text, nullptr, false);
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  std::fflush(stdout);
  if (missed && strict_deadlines) {
    std::fprintf(stderr, "braid: %d node%s missed %s deadline (--strict-deadlines)\n", missed,
                 missed == 1 ? "" : "s", missed == 1 ? "its" : "their");
    return 3;
  }
  return 0;
}

}  // namespace braid::cli
