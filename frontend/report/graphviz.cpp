#include "report/graphviz.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace braid::report {
namespace {

using Clock = std::chrono::steady_clock;

// `name` as execvp would find it in PATH, looked up before fork: the child
// of a threaded process may make only async-signal-safe calls until it
// execs, and a PATH search allocates. "" when there is none.
std::string FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* env = std::getenv("PATH");
  std::string_view path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const size_t colon = path.find(':');
    const std::string dir(path.substr(0, colon));
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) return "";
    path.remove_prefix(colon + 1);
  }
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

std::string Seconds(int ms) {
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

// Starts `exe` with stdin and stdout on new pipes; *to_child and
// *from_child get our ends (non-blocking). Returns the child's pid, or -1.
pid_t Spawn(const std::string& exe, char* const argv[], int* to_child, int* from_child) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return -1;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // The child, up to exec: async-signal-safe calls only. A process group
    // of its own, so that a kill reaches whatever it starts; SIGKILL when
    // the thread that forked it ends (the server died, even by -9).
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took hold
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);  // the server ignores it; exec keeps that
    if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0) _exit(127);
    execv(exe.c_str(), argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    return -1;
  }
  setpgid(pid, pid);  // here too, so that the group exists before any kill
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  *to_child = in[1];
  *from_child = out[0];
  return pid;
}

}  // namespace

Result<std::string> RunDot(std::string_view dot, std::string_view format, const DotLimits& limits,
                           const std::function<bool()>& cancelled) {
  if (limits.max_input_bytes > 0 && dot.size() > limits.max_input_bytes) {
    return Status::TooLarge("the graph's dot text is " + std::to_string(dot.size()) +
                            " bytes, over Graphviz's limit of " +
                            std::to_string(limits.max_input_bytes));
  }
  const std::string exe = FindProgram(limits.program);
  if (exe.empty()) {
    return Status::NotFound("Graphviz '" + limits.program + "' not found (install graphviz)");
  }
  // A write to a child that stopped reading must fail (EPIPE), not kill us.
  std::signal(SIGPIPE, SIG_IGN);
  std::string arg0 = limits.program, type = "-T" + std::string(format);
  char* const argv[] = {arg0.data(), type.data(), nullptr};
  int to_child = -1, from_child = -1;
  const pid_t pid = Spawn(exe, argv, &to_child, &from_child);
  if (pid < 0) return Status::IoError("cannot start " + exe + ": " + std::strerror(errno));

  const auto deadline = limits.timeout_ms > 0
                            ? Clock::now() + std::chrono::milliseconds(limits.timeout_ms)
                            : Clock::time_point::max();
  const Status out_of_time = Status::ResourceExhausted(
      "Graphviz did not finish within its limit of " + Seconds(limits.timeout_ms));
  auto stop = [&]() -> Status {
    if (cancelled && cancelled()) return Status::Cancelled("the graph's client went away");
    if (Clock::now() >= deadline) return out_of_time;
    return Status::Ok();
  };
  // Feed the text and collect the output together (either pipe can fill),
  // waking every 100 ms to check the time and the client.
  std::string output;
  size_t written = 0;
  Status failure;
  if (dot.empty()) CloseFd(&to_child);
  while (from_child >= 0) {
    failure = stop();
    if (!failure.ok()) break;
    pollfd fds[2] = {{from_child, POLLIN, 0}, {to_child, POLLOUT, 0}};
    const int ready = poll(fds, to_child >= 0 ? 2 : 1, 100);
    if (ready < 0 && errno != EINTR) {
      failure = Status::IoError("poll failed on Graphviz's pipes");
      break;
    }
    if (ready <= 0) continue;
    if (to_child >= 0 && fds[1].revents != 0) {
      const ssize_t n = write(to_child, dot.data() + written, dot.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      // An error (EPIPE: it stopped reading) shows in its exit status.
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == dot.size()) {
        CloseFd(&to_child);
      }
    }
    if (fds[0].revents != 0) {
      char buf[65536];
      const ssize_t n = read(from_child, buf, sizeof buf);
      if (n > 0) {
        output.append(buf, static_cast<size_t>(n));
        if (limits.max_output_bytes > 0 && output.size() > limits.max_output_bytes) {
          failure = Status::TooLarge("Graphviz's output passed its limit of " +
                                     std::to_string(limits.max_output_bytes) + " bytes");
          break;
        }
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        CloseFd(&from_child);  // it is done writing
      }
    }
  }
  CloseFd(&to_child);
  CloseFd(&from_child);
  // Its output is closed: it is exiting. Wait for that under the same limits.
  int wstatus = 0;
  while (failure.ok()) {
    const pid_t r = waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return Status::IoError("waitpid failed for Graphviz");
    failure = stop();
    if (!failure.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!failure.ok()) {
    kill(-pid, SIGKILL);  // the whole group: whatever it started goes too
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    return failure;
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return output;
  const std::string how = WIFEXITED(wstatus) ? "exit status " + std::to_string(WEXITSTATUS(wstatus))
                                             : "signal " + std::to_string(WTERMSIG(wstatus));
  return Status::IoError(limits.program + " -T" + std::string(format) + " failed (" + how + ")");
}

}  // namespace braid::report
