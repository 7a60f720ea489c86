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

// braid run's options, parsed, and the script's text.
struct RunCmdOptions {
  std::string script;
  std::vector<std::string> app_args;  // everything after the script
  std::string source;                 // the script's text
  StackOptions stack;
  std::string mode = "dag";  // dag, baseline or baseline-async
  int rtt_ms = 0;
  std::string graph;  // --graph PATH
  bool json = false;
  // Absent and empty differ: `--resume ""` (an unset variable in a script)
  // must not quietly start a fresh run.
  std::string resume;
  bool quiet = false;
  bool strict_deadlines = false;
  lua::DriverOptions driver;
};

// Where the script is in argv: our options come before it, everything after
// it is the app's. argv.size() when there is none.
size_t ScriptIndex(const std::vector<std::string>& argv) {
  for (size_t i = 0; i < argv.size(); ++i) {
    if (TakesValue(argv[i])) {
      ++i;
      continue;
    }
    if (argv[i].empty() || argv[i][0] != '-') return i;
  }
  return argv.size();
}

// braid run's own options (those before the script) into *o. Returns false
// with the message on stderr for a bad one.
bool ReadRunFlags(Args& args, RunCmdOptions* o) {
  o->stack = ReadStackOptions(args);
  o->mode = args.Str({"--mode"}, "dag");
  o->rtt_ms = static_cast<int>(args.Int({"--rtt-ms"}, 0, 0, 600000));
  o->graph = args.Str({"--graph"}, "");
  o->json = args.Flag({"--json"});
  const bool resuming = args.Has({"--resume"});
  o->resume = args.Str({"--resume"}, "");
  if (resuming && o->resume.empty()) args.Fail("option --resume: the run id is empty");
  o->quiet = args.Flag({"-q", "--quiet"});
  const std::string on_return = args.Str({"--on-return"}, "wait");
  o->strict_deadlines = args.Flag({"--strict-deadlines"});
  // The Lua limits have no "off" value here: 0, negative or NaN would lift a
  // cap of the sandbox without saying so.
  lua::LuaLimits& limits = o->driver.limits;
  limits.memory_bytes = static_cast<size_t>(args.Int({"--lua-memory-mb"}, 256, 1, 65536)) << 20;
  limits.cpu_seconds = args.Num({"--lua-seconds"}, 10.0, 0.001, 86400.0);
  limits.max_instructions =
      static_cast<uint64_t>(args.Int({"--lua-instructions"}, 0, 0, kMaxLuaInstructions));
  if (std::string e = args.Error(); !e.empty()) {
    std::fprintf(stderr, "braid run: %s\n", e.c_str());
    return false;
  }
  if (on_return != "wait" && on_return != "cancel") {
    std::fprintf(stderr, "braid run: --on-return must be wait or cancel, got '%s'\n",
                 on_return.c_str());
    return false;
  }
  o->driver.on_return = on_return == "wait" ? lua::DriverOptions::OnReturn::kWait
                                            : lua::DriverOptions::OnReturn::kCancel;
  if (o->mode != "dag" && o->mode != "baseline" && o->mode != "baseline-async") {
    std::fprintf(stderr, "braid run: --mode must be dag, baseline or baseline-async, got '%s'\n",
                 o->mode.c_str());
    return false;
  }
  // The baselines are FCFS unless told otherwise.
  if (o->mode != "dag" && !args.Has({"--policy"})) o->stack.policy = "fcfs";
  return true;
}

// The command line into *o and the script read and checked. Returns the
// exit status when braid run should exit now (help, a bad option, a script
// that cannot be read or does not compile), or -1 to go on.
int ReadRunOptions(const std::vector<std::string>& argv, RunCmdOptions* o) {
  const size_t script_at = ScriptIndex(argv);
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
  o->script = argv[script_at];
  o->app_args.assign(argv.begin() + script_at + 1, argv.end());
  if (!ReadRunFlags(args, o)) return 2;
  if (Status s = ReadRegularFile(o->script, kMaxInputFileBytes, &o->source); !s.ok()) {
    std::fprintf(stderr, "braid run: script: %s\n", s.message().c_str());
    return 2;
  }
  // A program that does not compile fails before the model loads and
  // before a run is recorded.
  if (Status s = lua::CheckSyntax(o->script, o->source, o->driver.limits); !s.ok()) {
    std::fprintf(stderr, "braid: %s\n", s.message().c_str());
    return 1;
  }
  if (!o->resume.empty() && o->stack.db.empty()) {
    std::fprintf(stderr, "braid run: --resume needs the run store (--db)\n");
    return 2;
  }
  return -1;
}

// The run, new or resumed, in the stack's runtime; its id on stderr when
// it is stored (even with -q: it is what --resume and braid runs take).
Result<std::shared_ptr<rt::Run>> StartRun(const RunCmdOptions& o, Stack& stack) {
  rt::RunOptions runo;
  // The absolute path, so that a resume from another directory (or through
  // another relative path) names the same program.
  std::error_code path_ec;
  std::filesystem::path absolute = std::filesystem::weakly_canonical(o.script, path_ec);
  runo.program = path_ec ? o.script : absolute.string();
  runo.program_hash = rt::ProgramHash(o.source);
  runo.args = o.app_args;
  runo.mode = o.mode == "baseline"         ? rt::Mode::kBaseline
              : o.mode == "baseline-async" ? rt::Mode::kBaselineAsync
                                           : rt::Mode::kDag;
  runo.rtt_ms = o.rtt_ms;
  runo.resume_id = o.resume;
  BRAID_ASSIGN_OR_RETURN(std::shared_ptr<rt::Run> run, stack.runtime->StartRun(runo));
  if (const std::string w = run->resume_warning(); !w.empty())
    std::fprintf(stderr, "braid run: warning: %s\n", w.c_str());
  if (!o.quiet) std::fprintf(stderr, "braid: %s\n", stack.KvSummary().c_str());
  if (!o.stack.db.empty())
    std::fprintf(stderr, "braid: run %s%s (store: %s)\n", run->id().c_str(),
                 o.resume.empty() ? "" : ", resumed", o.stack.db.c_str());
  return run;
}

// What the program gave and how long it took.
struct RunOutcome {
  Result<lua::ProgramResult> result;
  double elapsed_ms = 0;
};

// Runs the program under the live view with Ctrl-C as its interrupt, then
// finishes the run (unless interrupted: it then stays unfinished in the
// store, where it reads "interrupted" and resumes) and writes --graph.
RunOutcome ExecuteRun(RunCmdOptions& o, Stack& stack, rt::Run& run) {
  lua::LiveViewOptions vo;
  vo.tty = isatty(2) != 0;
  vo.progress = !o.quiet;
  vo.program = o.script;
  auto view = std::make_unique<lua::LiveView>(run, vo);
  lua::DriverOptions& dopts = o.driver;
  dopts.log = [&view](std::string_view line) { view->Log(line); };
  dopts.interrupt = &g_interrupt;
  dopts.script_dir = std::filesystem::path(o.script).parent_path().string();
  if (dopts.script_dir.empty()) dopts.script_dir = ".";
  auto old_handler = std::signal(SIGINT, OnSigint);

  auto t0 = std::chrono::steady_clock::now();
  RunOutcome out{lua::RunProgram(run, o.script, o.source, o.app_args, dopts), 0};
  out.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::signal(SIGINT, old_handler);
  run.Cancel();  // nodes nobody waits for any more (abandoned coroutines, errors)
  view->Stop();
  const Result<lua::ProgramResult>& result = out.result;
  const bool interrupted = !result.ok() && result.status().code() == StatusCode::kCancelled;
  if (!interrupted) run.Finish(result.ok() ? Status::Ok() : result.status());
  if (!o.graph.empty()) WriteGraph(run, o.graph);
  if (const std::string spec = stack.SpecSummary(); !spec.empty() && !o.quiet)
    std::fprintf(stderr, "braid: %s\n", spec.c_str());
  return out;
}

// --json: {run_id, program, mode, elapsed_ms, result | error, nodes}, with
// `fields` (result, error) added.
void PrintRunJson(const RunCmdOptions& o, const rt::Run& run, double elapsed_ms,
                  nlohmann::json fields) {
  nlohmann::json out;
  out["run_id"] = run.id();
  out["program"] = o.script;
  out["mode"] = o.mode;
  out["elapsed_ms"] = elapsed_ms;
  for (const auto& [k, v] : fields.items()) out[k] = v;
  out["nodes"] = report::NodesJson(run);
  std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

// Every node that missed its deadline, on stderr; returns how many.
int ReportMissedDeadlines(const rt::Run& run) {
  int missed = 0;
  for (const auto& n : run.Nodes()) {
    if (!n.deadline_met || *n.deadline_met) continue;
    ++missed;
    std::fprintf(
        stderr, "braid: %s#%llu missed its deadline: due at %.0f ms, %s\n", n.label.c_str(),
        static_cast<unsigned long long>(n.id), *n.deadline_ms,
        n.end_ms >= 0
            ? ("finished at " + std::to_string(static_cast<long>(n.end_ms)) + " ms").c_str()
            : "failed");
  }
  return missed;
}

// The program's error (and the resume hint); returns the exit status.
int ReportFailure(const RunCmdOptions& o, const rt::Run& run, const RunOutcome& out) {
  const Status& s = out.result.status();
  std::fprintf(stderr, "braid: %s\n", s.message().c_str());
  if (o.json) PrintRunJson(o, run, out.elapsed_ms, {{"result", nullptr}, {"error", s.message()}});
  // After an interrupt or an error alike: a resume replays the calls that
  // finished (the script may be fixed in between).
  if (!o.stack.db.empty())
    std::fprintf(stderr, "braid: resume with: braid run --resume %s %s\n", run.id().c_str(),
                 o.script.c_str());
  return s.code() == StatusCode::kCancelled ? 130 : 1;
}

// The program's return value on stdout: strings as is, tables as JSON, or
// the --json record; deadlines missed on stderr (and, with
// --strict-deadlines, in the exit status). Returns the exit status.
int ReportRun(const RunCmdOptions& o, const rt::Run& run, const RunOutcome& out) {
  if (!out.result.ok()) return ReportFailure(o, run, out);
  const int missed = ReportMissedDeadlines(run);
  const lua::ProgramResult& r = *out.result;
  if (o.json) {
    nlohmann::json result;
    if (r.kind == lua::ProgramResult::Kind::kString) {
      result = r.text;
    } else if (r.kind == lua::ProgramResult::Kind::kJson) {
      result = nlohmann::json::parse(r.text, nullptr, false);
    }
    PrintRunJson(o, run, out.elapsed_ms, {{"result", std::move(result)}});
  } else if (r.kind == lua::ProgramResult::Kind::kString) {
    std::fwrite(r.text.data(), 1, r.text.size(), stdout);
    if (r.text.empty() || r.text.back() != '\n') std::fputc('\n', stdout);
  } else if (r.kind == lua::ProgramResult::Kind::kJson) {
    auto j = nlohmann::json::parse(r.text, nullptr, false);
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  std::fflush(stdout);
  if (missed && o.strict_deadlines) {
    std::fprintf(stderr, "braid: %d node%s missed %s deadline (--strict-deadlines)\n", missed,
                 missed == 1 ? "" : "s", missed == 1 ? "its" : "their");
    return 3;
  }
  return 0;
}

}  // namespace

int RunMain(const std::vector<std::string>& argv) {
  RunCmdOptions o;
  if (int rc = ReadRunOptions(argv, &o); rc >= 0) return rc;
  auto opened = OpenStack(o.stack);
  if (!opened.ok()) {
    std::fprintf(stderr, "braid: %s\n", opened.status().message().c_str());
    return 1;
  }
  std::unique_ptr<Stack> stack = std::move(opened).value();
  auto started = StartRun(o, *stack);
  if (!started.ok()) {
    std::fprintf(stderr, "braid: %s\n", started.status().message().c_str());
    return 1;
  }
  std::shared_ptr<rt::Run> run = *started;
  const RunOutcome outcome = ExecuteRun(o, *stack, *run);
  return ReportRun(o, *run, outcome);
}

}  // namespace braid::cli
