#include "lua/live_view.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace braid::lua {
namespace {

const char* StateName(rt::NodeState s) {
  switch (s) {
    case rt::NodeState::kWaiting:
      return "waiting";
    case rt::NodeState::kReady:
      return "ready";
    case rt::NodeState::kRunning:
      return "running";
    case rt::NodeState::kDone:
      return "done";
    case rt::NodeState::kFailed:
      return "failed";
    case rt::NodeState::kCancelled:
      return "cancelled";
  }
  return "?";
}

const char* StateColor(rt::NodeState s) {
  switch (s) {
    case rt::NodeState::kRunning:
      return "\x1b[33m";
    case rt::NodeState::kDone:
      return "\x1b[32m";
    case rt::NodeState::kFailed:
      return "\x1b[31m";
    case rt::NodeState::kCancelled:
      return "\x1b[90m";
    default:
      return "\x1b[36m";
  }
}

bool Finished(rt::NodeState s) {
  return s == rt::NodeState::kDone || s == rt::NodeState::kFailed || s == rt::NodeState::kCancelled;
}

std::string Truncate(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n - 1) + "~";
  return s;
}

// What a node's rate column says: "scored" for selects, else the decode
// rate measured from its first token (prefill and queueing left out).
std::string Rate(const rt::NodeInfo& n) {
  if (n.scored) return "scored";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f tok/s", n.decode_tokens_per_s);
  return buf;
}

}  // namespace

// A node's name in at most `width` columns. "fn@FILE:LINE" names lose the
// front of FILE (then its directories) first: the line number is what tells
// two calls apart, so it is never cut.
std::string DisplayName(const std::string& label, size_t width) {
  if (label.size() <= width) return label;
  const size_t at = label.find('@');
  const size_t colon = label.rfind(':');
  if (at == std::string::npos || colon == std::string::npos || colon < at)
    return Truncate(label, width);
  const std::string head = label.substr(0, at + 1), tail = label.substr(colon);
  std::string file = label.substr(at + 1, colon - at - 1);
  if (const size_t slash = file.rfind('/'); slash != std::string::npos)
    file = file.substr(slash + 1);
  const size_t room = width > head.size() + tail.size() ? width - head.size() - tail.size() : 0;
  if (file.size() > room) file = room ? "~" + file.substr(file.size() - room + 1) : "";
  return head + file + tail;
}

// Each line of `text` cut to `columns` columns. Escape sequences (colours)
// take none and are kept; a tab goes to the next multiple of 8; any other
// character, one (wide characters are rare in what the view shows). A cut
// line ends with a colour reset, in case its reset was cut off.
std::string FitToWidth(const std::string& text, size_t columns) {
  std::string out;
  size_t col = 0;
  bool cut = false;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t len = 1;
    if (c == '\x1b') {  // ESC [ parameters, then a final byte in 0x40..0x7e
      if (i + 1 < text.size() && text[i + 1] == '[') {
        len = 2;
        while (i + len < text.size() && (text[i + len] < 0x40 || text[i + len] > 0x7e)) ++len;
        len = std::min(len + 1, text.size() - i);
      }
      out.append(text, i, len);
    } else if (c == '\n') {
      if (cut) out += "\x1b[0m";
      out += '\n';
      col = 0;
      cut = false;
    } else {
      while (i + len < text.size() && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80)
        ++len;  // the rest of a UTF-8 character
      const size_t next = c == '\t' ? (col / 8 + 1) * 8 : col + 1;
      if (next > columns) {
        cut = true;
      } else if (!cut) {
        out.append(text, i, len);
        col = next;
      }
    }
    i += len;
  }
  if (cut) out += "\x1b[0m";
  return out;
}

LiveView::LiveView(rt::Run& run, LiveViewOptions options)
    : run_(run), options_(std::move(options)), start_(std::chrono::steady_clock::now()) {
  if (options_.progress) thread_ = std::thread([this] { Loop(); });
}

LiveView::~LiveView() { Stop(); }

void LiveView::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.progress) Render(/*final=*/true);
  // Warnings even with -q: an output that is likely a mistake.
  for (const rt::NodeInfo& n : run_.Nodes())
    if (!n.warning.empty())
      std::fprintf(stderr, "braid: warning: %s#%llu: %s\n", n.label.c_str(),
                   static_cast<unsigned long long>(n.id), n.warning.c_str());
}

void LiveView::Log(std::string_view line) {
  std::lock_guard<std::mutex> lock(mu_);
  ClearBlock();
  std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  std::fflush(stderr);
}

void LiveView::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    Render(/*final=*/false);
    cv_.wait_for(lock, std::chrono::milliseconds(options_.redraw_ms), [this] { return stop_; });
  }
}

void LiveView::ClearBlock() {
  if (block_lines_ > 0) {
    std::fprintf(stderr, "\x1b[%dA\r\x1b[J", block_lines_);
    block_lines_ = 0;
  }
}

// Called with mu_ held.
void LiveView::Render(bool final) {
  std::vector<rt::NodeInfo> nodes = run_.Nodes();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  int done = 0, running = 0, failed = 0, tokens = 0;
  for (const auto& n : nodes) {
    done += Finished(n.state);
    running += n.state == rt::NodeState::kRunning;
    failed += n.state == rt::NodeState::kFailed;
    tokens += n.generated_tokens;
  }
  if (!options_.tty) {
    // Plain mode: one line per node as it finishes, and a summary at the end.
    for (const auto& n : nodes) {
      if (!Finished(n.state) || reported_.count(n.id)) continue;
      reported_.insert(n.id);
      std::fprintf(stderr, "[%d/%zu] #%llu %s %s", static_cast<int>(reported_.size()), nodes.size(),
                   static_cast<unsigned long long>(n.id), n.label.c_str(), StateName(n.state));
      if (n.state == rt::NodeState::kDone && n.call)
        std::fprintf(stderr, ": %d tokens in %.2f s (%s)%s%s", n.generated_tokens, n.run_ms / 1000,
                     Rate(n).c_str(), n.engine.empty() ? "" : " on ", n.engine.c_str());
      if (n.state == rt::NodeState::kFailed) std::fprintf(stderr, ": %s", n.error.c_str());
      std::fprintf(stderr, "\n");
    }
    if (final) {
      // Calls counted apart from joins and host values, as braid runs
      // counts the calls it recorded.
      size_t calls = 0;
      for (const auto& n : nodes) calls += n.call;
      std::fprintf(stderr, "run %s: %zu call%s", run_.id().c_str(), calls, calls == 1 ? "" : "s");
      if (calls < nodes.size())
        std::fprintf(stderr, " and %zu other node%s (joins, host values)", nodes.size() - calls,
                     nodes.size() - calls == 1 ? "" : "s");
      std::fprintf(stderr, " (%d failed), %d tokens generated, %.1f s\n", failed, tokens, secs);
    } else if (secs - last_heartbeat_ >= options_.heartbeat_s) {
      // A sign of life in logs: long calls may finish nothing for minutes.
      last_heartbeat_ = secs;
      std::fprintf(stderr, "run %s: %d/%zu nodes done, %d running, %d tokens, %.0f s\n",
                   run_.id().c_str(), done, nodes.size(), running, tokens, secs);
    }
    std::fflush(stderr);
    return;
  }
  ClearBlock();
  std::string out;
  char line[512];
  const int width = 24;
  int filled = nodes.empty() ? 0 : static_cast<int>(width * done / nodes.size());
  std::string bar(filled, '#');
  bar += std::string(width - filled, '.');
  std::snprintf(line, sizeof line,
                "\x1b[1m%s\x1b[0m %s [%s] %d/%zu nodes, %d running, %d tokens, %.1f s\n",
                Truncate(options_.program, 40).c_str(), run_.id().c_str(), bar.c_str(), done,
                nodes.size(), running, tokens, secs);
  out += line;
  // Rows: running and ready nodes first, then the most recent others.
  std::vector<const rt::NodeInfo*> rows;
  for (const auto& n : nodes)
    if (n.state == rt::NodeState::kRunning || n.state == rt::NodeState::kReady) rows.push_back(&n);
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it)
    if (it->state != rt::NodeState::kRunning && it->state != rt::NodeState::kReady)
      rows.push_back(&*it);
  const size_t kMaxRows = final ? 0 : 12;
  size_t shown = std::min(rows.size(), kMaxRows);
  for (size_t i = 0; i < shown; ++i) {
    const rt::NodeInfo& n = *rows[i];
    std::snprintf(line, sizeof line, "  #%-4llu %-32s %s%-9s\x1b[0m %5d tok %13s  %-10s %s%s\n",
                  static_cast<unsigned long long>(n.id), DisplayName(n.label, 32).c_str(),
                  StateColor(n.state), StateName(n.state), n.generated_tokens, Rate(n).c_str(),
                  n.wanted ? (n.goal == rt::Criteria::kLatency ? "latency" : "throughput") : "-",
                  n.engine.c_str(),
                  n.state == rt::NodeState::kFailed ? (" " + Truncate(n.error, 40)).c_str() : "");
    out += line;
  }
  if (rows.size() > shown && !final) {
    std::snprintf(line, sizeof line, "  ... %zu more\n", rows.size() - shown);
    out += line;
  }
  // A line wider than the terminal would wrap onto rows the next redraw
  // does not clear (it moves up one row per line): each line is cut to the
  // width, read again at each redraw (the terminal may have been resized).
  // One column is left free: some terminals wrap as soon as the last one
  // is written. The final block is never redrawn, so it is kept whole.
  winsize ws{};
  if (!final && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
    out = FitToWidth(out, ws.ws_col - 1);
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
  block_lines_ = final ? 0 : static_cast<int>(std::count(out.begin(), out.end(), '\n'));
}

}  // namespace braid::lua
