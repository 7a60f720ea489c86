// What braid repl runs its inputs on: the embedded stack (a Lua driver in
// this process) or a braid serve (the driver in a server session, reached
// over HTTP). The read loop, the commands' words and the printing are
// repl_cmd.cpp's; a session answers each input and each command.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"

namespace braid::cli {

struct Stack;

// One variable as :vars shows it.
struct ReplVar {
  uint64_t id = 0;
  std::string name, state, text;  // text: the value (ready) or the error
  uint64_t node = 0;              // the node that produces it (0: none)
  std::string label;              // that node's label (function name, "join")
};

class ReplSession {
 public:
  virtual ~ReplSession() = default;

  // Text of a variable's output as it generates (var, delta); any thread.
  using TokenFn = std::function<void(uint64_t var, std::string_view text)>;

  // One input, as Driver::Evaluate (program false) or Driver::EvaluateProgram
  // (program true: `source` is a program file's, run with `args`; its
  // bundled inputs are found in `dir`, when the session can read files).
  // Errors as Driver::Evaluate's: InvalidArgument (syntax, runtime error),
  // ResourceExhausted (a limit), Cancelled (interrupted), and IoError
  // for a server that cannot be reached.
  virtual Result<std::vector<std::string>> Evaluate(const std::string& name,
                                                    const std::string& source, bool program,
                                                    const std::vector<std::string>& args,
                                                    const std::string& dir,
                                                    const TokenFn& on_tokens) = 0;

  // The session's run id, and what the commands ask ("" run: the session's).
  virtual std::string run_id() const = 0;
  virtual Result<std::vector<ReplVar>> Vars(const std::string& run) = 0;
  // Lines describing runs: the session's first.
  virtual Result<std::vector<std::string>> Runs() = 0;
  // Writes the DAG of `run` to `path` (.svg/.png/.pdf through Graphviz, .dot as text).
  virtual Status Graph(const std::string& run, const std::string& path) = 0;
  virtual Result<std::vector<std::string>> Stats() = 0;
  virtual Result<std::vector<std::string>> Models() = 0;
  // The first line on a terminal.
  virtual std::string Banner() const = 0;
};

// The session on the embedded stack: one run and one Lua state; `interrupt`
// (set by Ctrl-C) stops an input.
Result<std::unique_ptr<ReplSession>> OpenLocalReplSession(Stack& stack, size_t lua_memory_bytes,
                                                          double lua_seconds,
                                                          const std::atomic<bool>* interrupt);

// A session on the server at `url` (http://host:port), with `api_key` when
// the server wants one: POST /v1/sessions, then each input through
// POST /v1/sessions/{id}/eval; `interrupt` sends .../interrupt. Errors:
// IoError (cannot connect), InvalidArgument (a bad URL, 401, or any
// other refusal, with the server's message).
Result<std::unique_ptr<ReplSession>> OpenRemoteReplSession(const std::string& url,
                                                           const std::string& api_key,
                                                           const std::atomic<bool>* interrupt);

}  // namespace braid::cli
