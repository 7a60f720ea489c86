// braid: the command line. Subcommands are dispatched here; each lives in its
// own file (generate_cmd.cpp, bench_cmd.cpp, ...).
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

void PrintUsage() {
  std::printf(
      "usage: braid <command> [options]\n"
      "\n"
      "commands:\n"
      "  generate   complete a prompt:   braid generate [-m MODEL] -p TEXT [-n N] [--temp T] ...\n"
      "  chat       interactive chat:    braid chat [-m MODEL]\n"
      "  bench      llama-bench style:   braid bench [-m MODEL] [-p 512] [-n 128] [-t THREADS]\n"
      "  run        run a Lua program:   braid run [-m MODEL] apps/map_reduce/app.lua [ARGS...]\n"
      "  runs       recorded runs:       braid runs [show ID | rm ID...] [--db PATH] [--json]\n"
      "  repl       Lua, input by input: braid repl [-m MODEL]\n"
      "  serve      the HTTP server:     braid serve [-m MODEL] [--port 8080] [--api-key-file F]\n"
      "\n"
      "Run 'braid <command> --help' for the options of one command.\n");
}

}  // namespace

int Dispatch(int argc, char** argv);

int main(int argc, char** argv) {
  // Every bound that input can reach is checked where the input is read; an
  // allocation that still fails (the machine is out of memory) ends the
  // command with a message instead of an abort.
  try {
    return Dispatch(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "braid: out of memory\n");
    return 1;
  } catch (const std::length_error& e) {
    std::fprintf(stderr, "braid: a size is out of range (%s)\n", e.what());
    return 1;
  }
}

int Dispatch(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    PrintUsage();
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "generate") return braid::cli::GenerateMain(args, /*chat=*/false);
  if (cmd == "chat") return braid::cli::GenerateMain(args, /*chat=*/true);
  if (cmd == "bench") return braid::cli::BenchMain(args);
#ifdef BRAID_HAVE_RUNTIME
  if (cmd == "run") return braid::cli::RunMain(args);
  if (cmd == "runs") return braid::cli::RunsMain(args);
  if (cmd == "repl") return braid::cli::ReplMain(args);
  if (cmd == "serve") return braid::cli::ServeMain(args);
#endif
  std::fprintf(stderr, "braid: unknown command '%s'\n", cmd.c_str());
  PrintUsage();
  return 2;
}
