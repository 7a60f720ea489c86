// Entry points of the braid subcommands. Each returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace braid::cli {

int GenerateMain(const std::vector<std::string>& args, bool chat);
int BenchMain(const std::vector<std::string>& args);
// braid run SCRIPT.lua [ARGS...]: a Lua program on embedded engines (run_cmd.cpp).
int RunMain(const std::vector<std::string>& args);

// braid repl: Lua with the braid module, input by input (repl_cmd.cpp).
int ReplMain(const std::vector<std::string>& args);

// braid serve: the HTTP server (serve_cmd.cpp).
int ServeMain(const std::vector<std::string>& args);

// braid runs [show ID | rm ID...]: the runs of a run store (runs_cmd.cpp).
int RunsMain(const std::vector<std::string>& args);
// The run store braid run and braid runs use by default (~/.cache/braid/runs.db).
std::string DefaultDb();

class Args;
// braid bench --serve (options already past --serve).
int ServeBenchMain(Args& args);

}  // namespace braid::cli
