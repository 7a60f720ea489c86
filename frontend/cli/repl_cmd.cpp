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
#include "cli/repl_session.h"
#include "cli/stack.h"
#include "lua/driver.h"
#include "report/run_report.h"

namespace braid::cli {
namespace {

const char* kReplHelp =
    "usage: braid repl [options]\n"
    "\n"
    "       braid repl --server URL [--api-key KEY]\n"
    "\n"
    "Lua with the braid module, input by input (docs/repl.md). An expression prints\n"
    "its value; a chunk left open (a function, a long string) continues on the next\n"
    "line; Ctrl-C stops the input being evaluated; Ctrl-D or :quit leaves. With a\n"
    "terminal, lines are edited with history (~/.cache/braid/repl_history); from a\n"
    "pipe, input is read as it comes.\n"
    "\n"
    "With --server, the inputs run in a session of the braid serve at URL (its model,\n"
    "its limits, no file access; the key also from BRAID_API_KEY); otherwise on the\n"
    "stack opened here:\n"
    "\n"
    "%s"
    "      --lua-memory-mb N   Lua memory cap, 1..65536 (default 256)\n"
    "      --lua-seconds S     time cap per input, 0.001..86400 (default 10): Lua code and\n"
    "                          the host calls it makes, not the waits for the model\n";

const char* kCommands =
    ":help             this list\n"
    ":load FILE [ARGS] run a program file in the session (its main function gets ARGS;\n"
    "                  \"...\" keeps blanks in one argument)\n"
    ":vars [RUN]       the variables of the session's run (or RUN) and their states\n"
    ":runs             the session's run, then other runs (the server's, or stored)\n"
    ":graph [RUN] [FILE] the DAG so far (default RUN.svg): .svg/.png/.pdf through\n"
    "                  Graphviz, .dot as text\n"
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

// A variable as the live view names its node: "summarize.summary #3" (the
// function, the output, the node); a join's "join5 #5"; a literal or a
// value the program sets (braid.map) by its name.
std::string VarName(const ReplVar& v) {
  if (!v.node) return v.name.empty() ? "(literal)" : v.name;
  const std::string node = " #" + std::to_string(v.node);
  if (v.label.empty() || v.name.rfind(v.label, 0) == 0) return v.name + node;
  return v.label + "." + v.name + node;
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
  void OnTokens(uint64_t var, std::string_view text) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    if (var_ == 0) var_ = var;
    if (var != var_) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    shown_ += text;
  }

 private:
  std::mutex mu_;
  bool active_ = false;
  uint64_t var_ = 0;
  std::string shown_;
};

class Repl {
 public:
  Repl(ReplSession& session, bool tty) : session_(session), tty_(tty) {}

  // Evaluates one input and prints what it gave; on a terminal, the output
  // it waits for streams first, and is not printed twice. Returns false,
  // printing nothing, when the input only ended too early (a syntax error
  // at <eof>: nothing ran) unless it is `last`.
  bool Evaluate(const std::string& input, bool last = false) {
    auto r = Run("", input, false, {}, "");  // named by its number: "input3"
    if (!last && !r.ok() && r.status().code() == StatusCode::kInvalidArgument &&
        lua::Driver::IsIncomplete(r.status().message()))
      return false;
    if (!(r.ok() && !shown_.empty() && r->size() == 1 && (*r)[0] == shown_)) Print(r);
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
    const size_t n = words.size();
    if (cmd == ":quit" || cmd == ":q") return false;
    if (cmd == ":help" || cmd == ":h") {
      std::fputs(kCommands, stdout);
    } else if (cmd == ":load" && n >= 2) {
      Load(words[1], std::vector<std::string>(words.begin() + 2, words.end()));
    } else if (cmd == ":vars" && n <= 2) {
      auto vars = session_.Vars(n == 2 ? words[1] : "");
      if (!vars.ok()) {
        std::printf("error: %s\n", vars.status().message().c_str());
      } else {
        for (const ReplVar& v : *vars)
          std::printf("%4llu  %-28s %-9s %s\n", static_cast<unsigned long long>(v.id),
                      VarName(v).c_str(), v.state.c_str(), OneLine(v.text, 60).c_str());
      }
    } else if (cmd == ":runs" && n == 1) {
      PrintLines(session_.Runs());
    } else if (cmd == ":graph" && n <= 3) {
      // :graph [RUN] [FILE]: a lone word naming a run (run-...) is the run.
      std::string run, path;
      if (n == 3) {
        run = words[1];
        path = words[2];
      } else if (n == 2 && words[1].rfind("run-", 0) == 0) {
        run = words[1];
      } else if (n == 2) {
        path = words[1];
      }
      if (path.empty()) path = (run.empty() ? session_.run_id() : run) + ".svg";
      if (Status s = session_.Graph(run, path); !s.ok()) {
        std::printf("error: %s\n", s.message().c_str());
      } else {
        std::printf("wrote %s\n", path.c_str());
      }
    } else if (cmd == ":stats" && n == 1) {
      PrintLines(session_.Stats());
    } else if (cmd == ":model" && n == 1) {
      PrintLines(session_.Models());
    } else {
      std::printf("unknown command '%s' (or wrong arguments); :help lists them\n", line.c_str());
    }
    std::fflush(stdout);
    return true;
  }

 private:
  // One input; on a terminal its first streaming output is echoed (shown_).
  Result<std::vector<std::string>> Run(const std::string& name, const std::string& source,
                                       bool program, const std::vector<std::string>& args,
                                       const std::string& dir) {
    g_interrupt.store(false);
    if (tty_) echo_.Begin();
    ReplSession::TokenFn echo;
    if (tty_) echo = [this](uint64_t var, std::string_view text) { echo_.OnTokens(var, text); };
    auto r = session_.Evaluate(name, source, program, args, dir, echo);
    shown_ = tty_ ? echo_.End() : "";
    return r;
  }

  void PrintLines(const Result<std::vector<std::string>>& lines) {
    if (!lines.ok()) {
      std::printf("error: %s\n", lines.status().message().c_str());
      return;
    }
    for (const std::string& l : *lines) std::printf("%s\n", l.c_str());
  }

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
  // braid run runs it; its bundled inputs are found beside it (on a server,
  // a program reads no files, as POST /v1/programs).
  void Load(const std::string& path, const std::vector<std::string>& args) {
    std::string source;
    if (Status s = ReadRegularFile(path, kMaxInputFileBytes, &source); !s.ok()) {
      std::printf("error: %s\n", s.message().c_str());
      return;
    }
    const std::string dir = std::filesystem::path(path).parent_path().string();
    Print(Run(path, source, true, args, dir));
  }

  ReplSession& session_;
  bool tty_;
  TokenEcho echo_;
  std::string shown_;
};

}  // namespace

int ReplMain(const std::vector<std::string>& argv) {
  Args args(argv);
  if (args.Flag({"-h", "--help"})) {
    std::printf(kReplHelp, kStackHelp);
    return 0;
  }
  const std::string server = args.Str({"--server"}, "");
  std::string api_key = args.Str({"--api-key"}, "");
  if (api_key.empty())
    if (const char* k = std::getenv("BRAID_API_KEY")) api_key = k;
  StackOptions so = ReadStackOptions(args);
  const size_t lua_memory = static_cast<size_t>(args.Int({"--lua-memory-mb"}, 256, 1, 65536)) << 20;
  const double lua_seconds = args.Num({"--lua-seconds"}, 10.0, 0.001, 86400.0);
  if (std::string e = args.Error(); !e.empty()) {
    std::fprintf(stderr, "braid repl: %s\n", e.c_str());
    return 2;
  }
  std::unique_ptr<Stack> stack;
  Result<std::unique_ptr<ReplSession>> opened = Status::Internal("not opened");
  if (!server.empty()) {
    opened = OpenRemoteReplSession(server, api_key, &g_interrupt);
  } else {
    auto stacked = OpenStack(so);
    if (!stacked.ok()) {
      std::fprintf(stderr, "braid: %s\n", stacked.status().message().c_str());
      return 1;
    }
    stack = std::move(stacked).value();
    opened = OpenLocalReplSession(*stack, lua_memory, lua_seconds, &g_interrupt);
  }
  if (!opened.ok()) {
    std::fprintf(stderr, "braid repl: %s\n", opened.status().message().c_str());
    return 1;
  }
  std::unique_ptr<ReplSession> session = std::move(opened).value();
  LineReader reader;
  if (reader.tty())
    std::printf("braid repl: %s. :help lists the commands.\n", session->Banner().c_str());
  Repl repl(*session, reader.tty());
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
  session.reset();  // before the stack it runs on
  return 0;
}

}  // namespace braid::cli
