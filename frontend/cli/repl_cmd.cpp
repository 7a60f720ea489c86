// braid repl: Lua with the braid module, one input at a time, against the
// embedded stack. All inputs share one Lua state and one run, so variables
// and functions defined earlier stay, and the DAG grows input by input.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#ifdef BRAID_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/file_util.h"
#include "cli/stack.h"
#include "lua/driver.h"
#include "report/run_report.h"

namespace braid::cli {
namespace {

const char* kReplHelp =
    "usage: braid repl [options]\n"
    "\n"
    "Lua with the braid module, input by input (docs/repl.md). An expression prints\n"
    "its value; a chunk left open (a function, a long string) continues on the next\n"
    "line; Ctrl-C stops the input being evaluated; Ctrl-D or :quit leaves. With a\n"
    "terminal, lines are edited with history (~/.cache/braid/repl_history); from a\n"
    "pipe, input is read as it comes.\n"
    "\n"
    "%s"
    "      --lua-memory-mb N   Lua memory cap, 1..65536 (default 256)\n"
    "      --lua-seconds S     Lua running time cap per input, 0.001..86400 (default 10)\n";

const char* kCommands =
    ":help             this list\n"
    ":load FILE [ARGS] run a program file in the session (its main function gets ARGS;\n"
    "                  \"...\" keeps blanks in one argument)\n"
    ":vars             the session's variables and their states\n"
    ":runs             the session's run: id, calls, variables\n"
    ":graph FILE       the DAG so far: .svg/.png/.pdf through Graphviz, .dot as text\n"
    ":stats            engine and prefix cache figures\n"
    ":model            the model each engine serves\n"
    ":quit             leave (also Ctrl-D)\n";

std::atomic<bool> g_interrupt{false};

extern "C" void OnReplSigint(int) { g_interrupt.store(true); }

// One line of input; false at end of input.
class LineReader {
 public:
  LineReader() : tty_(isatty(0) != 0 && isatty(1) != 0) {
#ifdef BRAID_HAVE_LIBEDIT
    if (tty_) {
      if (const char* home = std::getenv("HOME")) {
        std::error_code ec;
        std::filesystem::create_directories(std::string(home) + "/.cache/braid", ec);
        history_ = std::string(home) + "/.cache/braid/repl_history";
        read_history(history_.c_str());
      }
    }
#endif
  }
  ~LineReader() {
#ifdef BRAID_HAVE_LIBEDIT
    if (tty_ && !history_.empty()) write_history(history_.c_str());
#endif
  }
  bool tty() const { return tty_; }

  bool Read(const char* prompt, std::string* line) {
#ifdef BRAID_HAVE_LIBEDIT
    if (tty_) {
      char* got = readline(prompt);
      if (!got) return false;
      line->assign(got);
      std::free(got);
      if (!line->empty()) add_history(line->c_str());
      return true;
    }
#endif
    if (tty_) {
      std::fputs(prompt, stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, *line)) return false;
    return true;
  }

 private:
  bool tty_;
  std::string history_;
};

std::string StateName(rt::VarState s) {
  switch (s) {
    case rt::VarState::kPending:
      return "pending";
    case rt::VarState::kReady:
      return "ready";
    case rt::VarState::kFailed:
      return "failed";
    default:
      return "cancelled";
  }
}

// One line of a value: newlines shown as \n, at most `max` bytes.
std::string OneLine(const std::string& s, size_t max) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return report::Truncated(out, max);
}

// Splits a command line into words at blanks; "..." keeps blanks in a word
// (\" and \\ inside it stand for " and \). Returns an error, or "".
std::string SplitWords(const std::string& line, std::vector<std::string>* words) {
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ' || line[i] == '\t') {
      ++i;
      continue;
    }
    std::string word;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') {
      if (line[i] != '"') {
        word += line[i++];
        continue;
      }
      const size_t open = i++;
      while (i < line.size() && line[i] != '"') {
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        word += line[i++];
      }
      if (i >= line.size())
        return "the quote at column " + std::to_string(open + 1) + " is not closed";
      ++i;
    }
    words->push_back(std::move(word));
  }
  return "";
}

// While an input is evaluated on a terminal, the tokens of the first output
// that streams are shown as they come. Events arrive on an engine thread.
class TokenEcho {
 public:
  void Begin() {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = true;
    var_ = 0;
    shown_.clear();
  }
  // Stops; returns the text shown (ended with a newline on the screen).
  std::string End() {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = false;
    if (!shown_.empty()) {
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
    return std::move(shown_);
  }
  void OnEvent(const rt::RunEvent& e) {
    if (e.kind != rt::RunEvent::Kind::kTokens) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    if (var_ == 0) var_ = e.var;
    if (e.var != var_) return;
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
    shown_ += e.text;
  }

 private:
  std::mutex mu_;
  bool active_ = false;
  rt::VarId var_ = 0;
  std::string shown_;
};

class Repl {
 public:
  Repl(Stack& stack, rt::Run& run, lua::LuaState& state, const lua::DriverOptions& options,
       bool tty)
      : stack_(stack), run_(run), driver_(run, state, options), tty_(tty) {
    if (tty_) run_.Watch([this](const rt::RunEvent& e) { echo_.OnEvent(e); });
  }
  ~Repl() {
    if (tty_) run_.Watch(nullptr);
  }

  // Evaluates one input and prints what it gave; on a terminal, the output
  // it waits for streams first, and is not printed twice. Returns false,
  // printing nothing, when the input only ended too early (a syntax error
  // at <eof>: nothing ran) unless it is `last`.
  bool Evaluate(const std::string& input, bool last = false) {
    g_interrupt.store(false);
    if (tty_) echo_.Begin();
    auto r = driver_.Evaluate("stdin", input);
    const std::string shown = tty_ ? echo_.End() : "";
    if (!last && !r.ok() && r.status().code() == StatusCode::kInvalidArgument &&
        lua::Driver::IsIncomplete(r.status().message()))
      return false;
    if (!(r.ok() && !shown.empty() && r->size() == 1 && (*r)[0] == shown)) Print(r);
    return true;
  }

  // A ':' command; false for :quit.
  bool Command(const std::string& line) {
    std::vector<std::string> words;
    if (std::string bad = SplitWords(line, &words); !bad.empty()) {
      std::printf("error: %s\n", bad.c_str());
      std::fflush(stdout);
      return true;
    }
    const std::string cmd = words.empty() ? ":" : words[0];
    if (cmd == ":quit" || cmd == ":q") return false;
    if (cmd == ":help" || cmd == ":h") {
      std::fputs(kCommands, stdout);
    } else if (cmd == ":load" && words.size() >= 2) {
      Load(words[1], std::vector<std::string>(words.begin() + 2, words.end()));
    } else if (cmd == ":vars") {
      for (const rt::VarInfo& v : run_.Vars()) {
        std::printf("%4llu  %-24s %-9s %s\n", static_cast<unsigned long long>(v.id),
                    v.name.empty() ? "(literal)" : v.name.c_str(), StateName(v.state).c_str(),
                    v.state == rt::VarState::kReady    ? OneLine(v.value, 60).c_str()
                    : v.state == rt::VarState::kFailed ? OneLine(v.error, 60).c_str()
                                                       : "");
      }
    } else if (cmd == ":runs") {
      const auto nodes = run_.Nodes();
      size_t done = 0;
      for (const auto& n : nodes) done += n.state == rt::NodeState::kDone;
      std::printf("%s  %zu calls (%zu done), %zu variables\n", run_.id().c_str(), nodes.size(),
                  done, run_.Vars().size());
    } else if (cmd == ":graph" && words.size() == 2) {
      report::WriteGraph(run_, words[1]);
      std::printf("wrote %s\n", words[1].c_str());
    } else if (cmd == ":stats") {
      std::printf("%s\n", stack_.KvSummary().c_str());
      for (size_t e = 0; e < stack_.engines.size(); ++e) {
        const EngineStats st = stack_.engines[e]->stats();
        std::printf(
            "engine %zu: %llu requests, %llu prompt tokens (%llu from the prefix cache), %llu "
            "generated, %d running, %d waiting, KV blocks %d of %d in use\n",
            e, static_cast<unsigned long long>(st.requests_finished),
            static_cast<unsigned long long>(st.prompt_tokens),
            static_cast<unsigned long long>(st.cached_prompt_tokens),
            static_cast<unsigned long long>(st.generated_tokens), st.running, st.waiting,
            st.kv_blocks_total - st.kv_blocks_free, st.kv_blocks_total);
      }
    } else if (cmd == ":model") {
      for (size_t e = 0; e < stack_.engines.size(); ++e) {
        const Model* m = stack_.engines[e]->model();
        if (m) {
          std::printf("engine %zu: %s (%s, %s)\n", e, m->info().path.c_str(),
                      m->info().arch.c_str(), m->info().device.c_str());
        } else {
          std::printf("engine %zu: remote\n", e);
        }
      }
    } else {
      std::printf("unknown command '%s' (or missing argument); :help lists them\n", line.c_str());
    }
    std::fflush(stdout);
    return true;
  }

 private:
  void Print(const Result<std::vector<std::string>>& r) {
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kCancelled) {
        std::printf("interrupted\n");
      } else {
        // The first line names the place; the traceback follows for runtime errors.
        std::printf("error: %s\n", r.status().message().c_str());
      }
      std::fflush(stdout);
      return;
    }
    for (size_t i = 0; i < r->size(); ++i) std::printf("%s%s", i ? "\t" : "", (*r)[i].c_str());
    if (!r->empty()) std::printf("\n");
    std::fflush(stdout);
  }

  // A program file's chunk, and its main function called with `args`, as
  // braid run runs it; its bundled inputs are found beside it.
  void Load(const std::string& path, const std::vector<std::string>& args) {
    std::string source;
    if (Status s = ReadRegularFile(path, kMaxInputFileBytes, &source); !s.ok()) {
      std::printf("error: %s\n", s.message().c_str());
      return;
    }
    const std::string dir = std::filesystem::path(path).parent_path().string();
    driver_.set_script_dir(dir.empty() ? "." : dir);
    g_interrupt.store(false);
    Print(driver_.EvaluateProgram(path, source, args));
    driver_.set_script_dir(".");
  }

  Stack& stack_;
  rt::Run& run_;
  lua::Driver driver_;
  bool tty_;
  TokenEcho echo_;
};

}  // namespace

int ReplMain(const std::vector<std::string>& argv) {
  Args args(argv);
  if (args.Flag({"-h", "--help"})) {
    std::printf(kReplHelp, kStackHelp);
    return 0;
  }
  StackOptions so = ReadStackOptions(args);
  lua::DriverOptions dopts;
  dopts.limits.memory_bytes = static_cast<size_t>(args.Int({"--lua-memory-mb"}, 256, 1, 65536))
                              << 20;
  dopts.limits.cpu_seconds = args.Num({"--lua-seconds"}, 10.0, 0.001, 86400.0);
  if (std::string e = args.Error(); !e.empty()) {
    std::fprintf(stderr, "braid repl: %s\n", e.c_str());
    return 2;
  }
  auto opened = OpenStack(so);
  if (!opened.ok()) {
    std::fprintf(stderr, "braid: %s\n", opened.status().message().c_str());
    return 1;
  }
  std::unique_ptr<Stack> stack = std::move(opened).value();
  rt::RunOptions runo;
  runo.program = "repl";
  auto started = stack->runtime->StartRun(runo);
  if (!started.ok()) {
    std::fprintf(stderr, "braid: %s\n", started.status().message().c_str());
    return 1;
  }
  std::shared_ptr<rt::Run> run = *started;
  std::unique_ptr<lua::LuaState> state = lua::LuaState::Create(dopts.limits);
  if (!state) {
    std::fprintf(stderr, "braid repl: cannot create a Lua state\n");
    return 1;
  }
  dopts.interrupt = &g_interrupt;
  dopts.script_dir = ".";
  dopts.log = [](std::string_view line) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };
  LineReader reader;
  if (reader.tty())
    std::printf("braid repl: %s; run %s. :help lists the commands.\n", stack->KvSummary().c_str(),
                run->id().c_str());
  Repl repl(*stack, *run, *state, dopts, reader.tty());
  auto old_handler = std::signal(SIGINT, OnReplSigint);
  std::string pending, line;
  while (reader.Read(pending.empty() ? "braid> " : "  ...> ", &line)) {
    if (pending.empty() && !line.empty() && line[0] == ':') {
      if (!repl.Command(line)) break;
      continue;
    }
    pending += pending.empty() ? line : "\n" + line;
    if (pending.find_first_not_of(" \t") == std::string::npos) {
      pending.clear();
      continue;
    }
    if (repl.Evaluate(pending)) pending.clear();
  }
  if (!pending.empty()) repl.Evaluate(pending, /*last=*/true);  // the error says what was left open
  std::signal(SIGINT, old_handler);
  run->Cancel();
  run->Finish(Status::Ok());
  return 0;
}

}  // namespace braid::cli
