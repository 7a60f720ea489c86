// The live view of a run on stderr: on a terminal, a block redrawn about
// five times a second with a progress bar for the run and one row per
// interesting node (state, tokens, decode rate, goal, engine); elsewhere, one
// plain line per node as it finishes and a heartbeat line every few seconds.
// Log lines (braid.log, print) are printed above the block.
//
// Threading: the view polls Run::Nodes() (safe from any thread) on its own
// thread; Log may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "runtime/runtime.h"

namespace braid::lua {

struct LiveViewOptions {
  bool tty = false;      // redraw a block (else plain progress lines)
  bool progress = true;  // false (--quiet): only log lines are printed
  std::string program;   // shown in the header
  int redraw_ms = 200;
  double heartbeat_s = 5;  // plain mode: a progress line at least this often
};

// A node's name in at most `width` columns; "fn@FILE:LINE" keeps its line.
std::string DisplayName(const std::string& label, size_t width);

// Each line of `text` cut to at most `columns` columns, escape sequences
// kept (they take none), so that no line wraps on a terminal that wide.
std::string FitToWidth(const std::string& text, size_t columns);

class LiveView {
 public:
  LiveView(rt::Run& run, LiveViewOptions options);
  ~LiveView();  // calls Stop
  void Log(std::string_view line);
  // Stops the thread; on a terminal the block is replaced by its final state.
  void Stop();

 private:
  void Loop();
  void Render(bool final);
  void ClearBlock();

  rt::Run& run_;
  LiveViewOptions options_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int block_lines_ = 0;            // lines of the block now on screen
  std::set<rt::NodeId> reported_;  // plain mode: nodes already printed
  double last_heartbeat_ = 0;      // plain mode: seconds into the run
  std::thread thread_;
};

}  // namespace braid::lua
