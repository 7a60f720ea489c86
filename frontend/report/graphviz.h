// Graphviz's dot as a child process under limits. A run's graph can be
// large (a DAG of 200 calls and 200 joins of 200 parts each kept dot busy
// for over ten minutes), and the server renders graphs for any client; so
// dot runs with a time limit and size limits, and never outlives the thread
// that waits for it.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "engine/status.h"

namespace braid::report {

struct DotLimits {
  std::string program = "dot";                 // a name looked up in PATH, or a path
  int timeout_ms = 10000;                      // 0: none
  size_t max_input_bytes = size_t{4} << 20;    // the dot text; 0: none
  size_t max_output_bytes = size_t{32} << 20;  // what dot writes; 0: none
};

// Runs `program -T<format>` with `dot` on its stdin and returns what it
// writes on its stdout (its stderr is the caller's). The child runs in a
// process group of its own, killed (SIGKILL) when the time runs out, when
// its output passes the limit, or when `cancelled` returns true (asked every
// 100 ms; the client went away); and it is killed when the calling thread
// or the process dies (PR_SET_PDEATHSIG), so a server killed with -9 leaves
// no dot behind. Blocks the calling thread until the child is gone.
// Errors: TooLarge (the input or the output over its limit, naming it),
// ResourceExhausted (the time limit, naming it), Cancelled, NotFound (no
// such program), IoError (it failed, or the pipes or fork did).
Result<std::string> RunDot(std::string_view dot, std::string_view format, const DotLimits& limits,
                           const std::function<bool()>& cancelled = {});

}  // namespace braid::report
