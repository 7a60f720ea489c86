// RunDot with Graphviz when it is installed, and with stand-in programs (shell
// scripts written here) for the limits: time, input and output sizes, a
// client gone, a failing or missing program, and the process group killed.
#include "report/graphviz.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace braid::report {
namespace {

// How long a wait for something that must happen may take before the test
// fails: only a bound on a hang, far beyond what a loaded machine needs.
constexpr auto kHang = std::chrono::seconds(60);

// A directory of its own for this process's scripts.
std::string TempDir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/braid-graphviz-test-XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  return dir;
}

// Writes an executable shell script; returns its path.
std::string Script(const std::string& name, const std::string& body) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), 0755);
  return path;
}

// The process exists and is not a zombie.
bool Alive(const std::string& pid) {
  std::ifstream f("/proc/" + pid + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

bool WaitGone(const std::string& pid) {
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  while (Alive(pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return !Alive(pid);
}

TEST_CASE("RunDot: Graphviz renders a graph") {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: Graphviz 'dot' is not installed");
    return;
  }
  auto svg = RunDot("digraph { a -> b }", "svg", DotLimits());
  REQUIRE_MESSAGE(svg.ok(), svg.status().ToString());
  CHECK(svg->find("<svg") != std::string::npos);
  auto bad = RunDot("digraph { a -> ", "svg", DotLimits());
  CHECK(bad.status().code() == StatusCode::kIoError);
}

TEST_CASE("RunDot: the text in, the output out, however large both are") {
  DotLimits limits;
  limits.program = Script("echo-dot", "printf '%s:' \"$1\"; exec cat");
  const std::string text(3 << 20, 'g');  // more than either pipe holds: written and read together
  auto out = RunDot(text, "svg", limits);
  REQUIRE_MESSAGE(out.ok(), out.status().ToString());
  CHECK(*out == "-Tsvg:" + text);
  auto empty = RunDot("", "png", limits);
  REQUIRE(empty.ok());
  CHECK(*empty == "-Tpng:");
}

TEST_CASE("RunDot: the limits and failures give their Status") {
  DotLimits limits;
  limits.program = Script("echo-dot2", "exec cat");
  limits.max_input_bytes = 10;
  auto big_in = RunDot("01234567890", "svg", limits);
  CHECK(big_in.status().code() == StatusCode::kTooLarge);
  CHECK(big_in.status().message().find("limit of 10") != std::string::npos);

  limits = DotLimits();
  limits.program = Script("chatty-dot", "exec yes");
  limits.max_output_bytes = 1 << 20;
  auto big_out = RunDot("x", "svg", limits);
  CHECK(big_out.status().code() == StatusCode::kTooLarge);
  CHECK(big_out.status().message().find(std::to_string(1 << 20)) != std::string::npos);

  limits = DotLimits();
  limits.program = Script("failing-dot", "cat >/dev/null; exit 3");
  auto failed = RunDot("x", "svg", limits);
  CHECK(failed.status().code() == StatusCode::kIoError);
  CHECK(failed.status().message().find("exit status 3") != std::string::npos);

  limits.program = "/nonexistent/dot";
  CHECK(RunDot("x", "svg", limits).status().code() == StatusCode::kNotFound);
  limits.program = "no-such-dot-anywhere";
  CHECK(RunDot("x", "svg", limits).status().code() == StatusCode::kNotFound);
}

TEST_CASE("RunDot: out of time or a client gone, the child's whole group is killed") {
  // The stand-in starts a helper (in its process group), says its pid and
  // never ends.
  const std::string pids = TempDir() + "/pids";
  auto helper = [&] {
    std::string pid;
    std::ifstream(pids) >> pid;
    return pid;
  };
  DotLimits limits;
  limits.program = Script("stuck-dot", "sleep 3600 &\necho $! > " + pids + ".new\nmv " + pids +
                                           ".new " + pids + "\nexec sleep 3600");
  limits.timeout_ms = 200;
  auto late = RunDot("x", "svg", limits);
  CHECK(late.status().code() == StatusCode::kResourceExhausted);
  CHECK(late.status().message().find("200 ms") != std::string::npos);
  if (!helper().empty()) CHECK(WaitGone(helper()));  // if it got as far as starting one

  // The client goes once the helper runs: no time limit needed to end it.
  std::remove(pids.c_str());
  limits.timeout_ms = 0;
  auto gone = RunDot("x", "svg", limits, [&] { return !helper().empty(); });
  CHECK(gone.status().code() == StatusCode::kCancelled);
  REQUIRE(!helper().empty());
  CHECK(WaitGone(helper()));
}

}  // namespace
}  // namespace braid::report
