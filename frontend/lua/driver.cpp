#include "lua/driver.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

#include "lua/lib_braid.h"

namespace braid::lua {
namespace {

// The script's clock (LuaState::BeginWork/BeginWait) for a scope.
struct Working {
  LuaState& s;
  explicit Working(LuaState& state) : s(state) { s.BeginWork(); }
  ~Working() { s.EndWork(); }
};
struct Waiting {
  LuaState& s;
  explicit Waiting(LuaState& state) : s(state) { s.BeginWait(); }
  ~Waiting() { s.EndWait(); }
};

int OpenBraid(lua_State* L) {
  luaL_requiref(L, "braid", luaopen_braid, 1);
  return 0;
}

// The error object of a failed coroutine as text, without calling any
// metamethod (we are outside every protected call here).
std::string ErrorText(lua_State* co) {
  int t = lua_type(co, -1);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    lua_pushvalue(co, -1);
    std::string s = lua_tostring(co, -1);
    lua_pop(co, 1);
    return s;
  }
  if (t == LUA_TNIL) return "error (nil error object)";
  return std::string("error object is a ") + lua_typename(co, t) + " value";
}

// A traceback without the frames of the braid module's own Lua (chunk
// "[braid]": the bootstrap that calls a program's main or a REPL input),
// which say nothing about the program.
std::string WithoutBootstrapFrames(const std::string& traceback) {
  std::string out;
  size_t at = 0;
  while (at < traceback.size()) {
    size_t end = traceback.find('\n', at);
    if (end == std::string::npos) end = traceback.size();
    const std::string line = traceback.substr(at, end - at);
    if (line.find("[braid]:") == std::string::npos) out += (out.empty() ? "" : "\n") + line;
    at = end + 1;
  }
  return out;
}

// Converts the value at `idx` of L to JSON. Host section code: raw access
// only. Errors name the path to the bad value.
bool ToJson(lua_State* L, int idx, int depth, const std::string& path, nlohmann::json* out,
            std::string* error, size_t* budget) {
  idx = lua_absindex(L, idx);
  // Every value costs its bytes (strings) or a few (the rest) of `budget`.
  auto spend = [&](size_t bytes) {
    if (bytes + 16 > *budget) {
      *error = "the result is larger than the memory limit (--lua-memory-mb) once written out";
      return false;
    }
    *budget -= bytes + 16;
    return true;
  };
  if (!spend(0)) return false;
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      *out = nullptr;
      return true;
    case LUA_TBOOLEAN:
      *out = static_cast<bool>(lua_toboolean(L, idx));
      return true;
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) {
        *out = static_cast<int64_t>(lua_tointeger(L, idx));
      } else {
        double x = lua_tonumber(L, idx);
        if (std::isfinite(x)) {
          *out = x;
        } else {
          *out = nullptr;
        }
      }
      return true;
    case LUA_TSTRING: {
      size_t len = 0;
      const char* s = lua_tolstring(L, idx, &len);
      if (!spend(len)) return false;
      *out = std::string(s, len);
      return true;
    }
    case LUA_TTABLE:
      break;
    default:
      *error = "the result" + path + " is a " + lua_typename(L, lua_type(L, idx)) +
               ", which has no JSON form";
      return false;
  }
  if (depth > 64) {
    *error = "the result is nested more than 64 levels deep";
    return false;
  }
  if (!lua_checkstack(L, 4)) {
    *error = "the result is too deep";
    return false;
  }
  lua_Unsigned n = lua_rawlen(L, idx);
  lua_Unsigned count = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    ++count;
    lua_pop(L, 1);
  }
  if (count == n) {  // a sequence 1..n (or empty): an array
    *out = nlohmann::json::array();
    for (lua_Unsigned i = 1; i <= n; ++i) {
      lua_rawgeti(L, idx, static_cast<lua_Integer>(i));
      nlohmann::json v;
      bool ok = ToJson(L, -1, depth + 1, path + "[" + std::to_string(i) + "]", &v, error, budget);
      lua_pop(L, 1);
      if (!ok) return false;
      out->push_back(std::move(v));
    }
    return true;
  }
  *out = nlohmann::json::object();
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    std::string key;
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING) {
      key = lua_tostring(L, -2);
    } else if (kt == LUA_TNUMBER) {
      lua_pushvalue(L, -2);
      key = lua_tostring(L, -1);
      lua_pop(L, 1);
    } else if (kt == LUA_TBOOLEAN) {
      key = lua_toboolean(L, -2) ? "true" : "false";
    } else {
      lua_pop(L, 2);
      *error =
          "the result" + path + " has a " + lua_typename(L, kt) + " key, which has no JSON form";
      return false;
    }
    if (!spend(key.size())) {
      lua_pop(L, 2);
      return false;
    }
    nlohmann::json v;
    bool ok = ToJson(L, -1, depth + 1, path + "." + key, &v, error, budget);
    lua_pop(L, 1);
    if (!ok) {
      lua_pop(L, 1);
      return false;
    }
    (*out)[key] = std::move(v);
  }
  return true;
}

}  // namespace

Result<ProgramResult> RunProgram(rt::Run& run, const std::string& chunkname,
                                 const std::string& source, const std::vector<std::string>& args,
                                 const DriverOptions& options) {
  std::unique_ptr<LuaState> state = LuaState::Create(options.limits);
  if (!state) return Status::ResourceExhausted("cannot create a Lua state");
  Driver driver(run, *state, options);
  return driver.Execute(chunkname, source, args);
}

Status CheckSyntax(const std::string& chunkname, const std::string& source,
                   const LuaLimits& limits) {
  std::unique_ptr<LuaState> state = LuaState::Create(limits);
  if (!state) return Status::ResourceExhausted("cannot create a Lua state");
  if (state->LoadText(source, chunkname)) return Status::Ok();
  return Status::InvalidArgument(ErrorText(state->L()));
}

Driver::Driver(rt::Run& run, LuaState& state, const DriverOptions& options)
    : run_(run), state_(state), options_(options) {
  *static_cast<Driver**>(lua_getextraspace(state_.L())) = this;
  if (options_.log) state_.SetLogger(options_.log);
  state_.SetInterruptFlag(options_.interrupt);
  current_ = -1;
}

Driver::~Driver() { *static_cast<Driver**>(lua_getextraspace(state_.L())) = nullptr; }

Driver* Driver::From(lua_State* L) { return *static_cast<Driver**>(lua_getextraspace(L)); }

Driver::Coroutine* Driver::coroutine(int id) {
  if (id < 0 || id >= static_cast<int>(coros_.size())) return nullptr;
  return coros_[id].get();
}

rt::CallKey Driver::NextCallKey() {
  if (current_ < 0) return rt::CallKey{"init", 0};
  Coroutine& c = current();
  return rt::CallKey{c.path, c.calls++};
}

void Driver::NoteReads(const std::vector<rt::VarId>& vars) {
  if (current_ < 0 || vars.empty()) return;
  std::vector<rt::VarId>& reads = current().reads;
  for (rt::VarId v : vars)
    if (std::find(reads.begin(), reads.end(), v) == reads.end()) reads.push_back(v);
  reads = run_.LatestOf(reads);
}

std::vector<rt::VarId> Driver::Reads() const {
  return current_ < 0 ? std::vector<rt::VarId>{} : coros_[current_]->reads;
}

std::string Driver::NextReplayKey(const std::string& what) {
  // Before any coroutine runs (while the module opens) the path is "init".
  std::map<std::string, int>& counts = current_ < 0 ? init_replays_ : current().replays;
  std::string path = current_ < 0 ? "init" : current().path;
  return path + ":" + what + "#" + std::to_string(counts[what]++);
}

int Driver::AddFunction(std::shared_ptr<const rt::SemanticFunction> fn) {
  if (functions_.size() >= options_.max_functions) return -1;
  functions_.push_back(std::move(fn));
  return static_cast<int>(functions_.size() - 1);
}

const rt::SemanticFunction* Driver::function(int index) const {
  return index >= 0 && index < static_cast<int>(functions_.size()) ? functions_[index].get()
                                                                   : nullptr;
}

void Driver::NameVar(rt::VarId var, std::string name) { var_names_[var] = std::move(name); }

std::string Driver::VarName(rt::VarId var) const {
  auto it = var_names_.find(var);
  return it != var_names_.end() ? it->second : "variable #" + std::to_string(var);
}

int Driver::Spawn(lua_State* L, int nargs, bool background, std::string* error) {
  if (coros_.size() >= options_.max_coroutines) {
    *error = "too many coroutines (limit " + std::to_string(options_.max_coroutines) + ")";
    lua_pop(L, nargs + 1);
    return -1;
  }
  auto c = std::make_unique<Coroutine>();
  c->id = static_cast<int>(coros_.size());
  if (current_ < 0) {
    c->path = top_path_;
  } else {
    Coroutine& parent = current();
    c->path = parent.path + "/" + std::to_string(++parent.spawns);
    c->reads = parent.reads;
  }
  c->background = background;
  c->thread = lua_newthread(L);
  state_.MarkHostThread(L, -1);
  c->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  if (!lua_checkstack(c->thread, nargs + 2)) {
    *error = "too many arguments";
    luaL_unref(L, LUA_REGISTRYINDEX, c->ref);
    lua_pop(L, nargs + 1);
    return -1;
  }
  lua_xmove(L, c->thread, nargs + 1);
  c->nargs = nargs;
  runnable_.push_back(c->id);
  coros_.push_back(std::move(c));
  return static_cast<int>(coros_.size() - 1);
}

void Driver::BlockOnVar(rt::VarId var, bool wanted) {
  Coroutine& c = current();
  c.status = CoStatus::kWaitVar;
  c.var = var;
  c.wanted = wanted;
}

void Driver::BlockOnSleep(double seconds) {
  Coroutine& c = current();
  c.status = CoStatus::kSleep;
  c.wake_at = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(seconds));
}

void Driver::BlockOnJoin(int target) {
  Coroutine& c = current();
  c.status = CoStatus::kWaitJoin;
  c.join_target = target;
  coros_[target]->joiners.push_back(c.id);
}

int Driver::PushResults(int id, lua_State* L) {
  Coroutine& c = *coros_[id];
  if (c.nresults == 0) return 0;
  if (!lua_checkstack(L, c.nresults + 1)) return -1;
  lua_rawgeti(L, LUA_REGISTRYINDEX, c.results_ref);
  for (int i = 1; i <= c.nresults; ++i) lua_rawgeti(L, -i, i);
  lua_remove(L, -(c.nresults + 1));
  return c.nresults;
}

bool Driver::KeepResults(Coroutine& c, int nres) {
  // The results move into a registry table and the thread's stack is
  // emptied: the thread is then dead to Lua, and what join returns cannot be
  // changed by a script that still holds the thread (coroutine.running()).
  lua_State* L = state_.L();
  if (!lua_checkstack(L, nres + 2)) {
    lua_settop(c.thread, 0);
    return false;
  }
  lua_xmove(c.thread, L, nres);
  lua_settop(c.thread, 0);
  lua_createtable(L, nres, 0);
  lua_insert(L, -(nres + 1));
  for (int i = nres; i >= 1; --i) lua_rawseti(L, -(i + 1), i);
  c.results_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  c.nresults = nres;
  return true;
}

namespace {

// Closes a file descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string OpenErrorText(const std::string& path, int err) {
  return "braid.read: cannot open '" + path + "': " + std::strerror(err);
}

// Why openat(dir, name, ... O_NOFOLLOW) failed with `err`, in words: a
// symbolic link is named as such.
std::string OpenAtErrorText(int dir, const std::string& name, const std::string& path, int err) {
  struct stat st {};
  if ((err == ELOOP || err == ENOTDIR) &&
      ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    return "braid.read: '" + path + "' is or passes through a symbolic link ('" + name +
           "'); only regular files beside the script can be read";
  return OpenErrorText(path, err);
}

}  // namespace

Result<std::string> Driver::ReadFile(const std::string& path) const {
  if (!options_.read_files)
    return Status::InvalidArgument(
        "braid.read: a program run by a server has no file access ('" + path +
        "' was not read): pass the text itself as one of the program's args, or in its source");
  bool granted = false;
  for (const std::string& a : args_) granted = granted || a == path;
  Fd file;
  if (granted) {
    // The user named this file on the command line.
    file.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (file.fd < 0) return Status::NotFound(OpenErrorText(path, errno));
  } else {
    // A file beside the script: walked one component at a time from the
    // script's directory, never following a symbolic link, so nothing
    // outside the directory can be reached.
    std::filesystem::path p(path);
    bool bad = p.empty() || p.is_absolute() || options_.script_dir.empty();
    std::vector<std::string> parts;
    for (const auto& part : p) {
      bad = bad || part == "..";
      if (!part.empty() && part != ".") parts.push_back(part.string());
    }
    if (bad || parts.empty())
      return Status::InvalidArgument(
          "braid.read: '" + path + "' is neither a program argument nor a file beside the script");
    Fd dir;
    dir.fd = ::open(options_.script_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir.fd < 0) return Status::NotFound(OpenErrorText(options_.script_dir, errno));
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      int next =
          ::openat(dir.fd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0) return Status::NotFound(OpenAtErrorText(dir.fd, parts[i], path, errno));
      ::close(dir.fd);
      dir.fd = next;
    }
    file.fd =
        ::openat(dir.fd, parts.back().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (file.fd < 0) return Status::NotFound(OpenAtErrorText(dir.fd, parts.back(), path, errno));
  }
  // Regular files only (a FIFO or a device could block or never end), and
  // the size checked before reading.
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) return Status::IoError(OpenErrorText(path, errno));
  if (!S_ISREG(st.st_mode))
    return Status::InvalidArgument("braid.read: '" + path + "' is not a regular file");
  const std::string too_big = "braid.read: '" + path + "' is larger than " +
                              std::to_string(options_.max_read_bytes >> 20) + " MB";
  if (static_cast<uint64_t>(st.st_size) > options_.max_read_bytes)
    return Status::OutOfRange(too_big);
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (true) {
    // Files whose size stat does not know (/proc) or that grow are read on,
    // up to the cap.
    if (got == data.size()) {
      if (data.size() > options_.max_read_bytes) return Status::OutOfRange(too_big);
      data.resize(std::min(options_.max_read_bytes + 1, std::max<size_t>(data.size() * 2, 4096)));
    }
    ssize_t n = ::read(file.fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Status::IoError("braid.read: error reading '" + path + "': " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > options_.max_read_bytes) return Status::OutOfRange(too_big);
  data.resize(got);
  return data;
}

void Driver::Wake(Coroutine& c) {
  if (c.status == CoStatus::kDone || c.status == CoStatus::kFailed ||
      c.status == CoStatus::kRunnable)
    return;
  c.status = CoStatus::kRunnable;
  c.var = 0;
  c.join_target = -1;
  runnable_.push_back(c.id);
}

std::string Driver::ErrorWithTraceback(lua_State* co, int status) {
  std::string msg = ErrorText(co);
  LimitHit hit = state_.limit_hit();
  if (hit != LimitHit::kNone &&
      (status == LUA_ERRMEM || msg.find("not enough memory") != std::string::npos)) {
    msg = hit == LimitHit::kMemory ? state_.LimitMessage() : state_.limit_error();
  }
  return msg;
}

void Driver::Step(int id) {
  Coroutine& c = *coros_[id];
  if (c.status != CoStatus::kRunnable) return;
  current_ = id;
  lua_State* co = c.thread;
  int nres = 0;
  int st = LUA_YIELD;
  // The limits are checked before every resume as well: a coroutine that
  // runs too few instructions for the count hook (one of many short ones)
  // is not resumed once they are over, and ends as if the hook stopped it.
  if (!state_.CheckLimitsNow()) {
    state_.BeginSlice(co);
    st = lua_resume(co, state_.L(), c.nargs, &nres);
    state_.EndSlice();
  }
  current_ = -1;
  c.nargs = 0;
  LimitHit hit = state_.limit_hit();
  // A limit (other than memory, which raises) makes the hook yield: the
  // coroutine is never resumed again.
  bool stopped = st == LUA_YIELD && hit != LimitHit::kNone && hit != LimitHit::kMemory;
  if (st == LUA_YIELD && !stopped) {
    // A host request (get/join: the status says what we wait for) or a
    // plain coroutine.yield (stay runnable: the others get a turn).
    lua_pop(co, nres);
    if (c.status == CoStatus::kRunnable) runnable_.push_back(id);
    return;
  }
  if (st == LUA_OK && KeepResults(c, nres)) {
    c.status = CoStatus::kDone;
  } else {
    c.status = CoStatus::kFailed;
    if (st == LUA_OK) {
      c.error = "coroutine " + c.path + " returned too many values";
    } else {
      c.error = stopped ? state_.limit_error() : ErrorWithTraceback(co, st);
    }
    luaL_traceback(state_.L(), co, nullptr, 0);
    c.traceback = WithoutBootstrapFrames(lua_tostring(state_.L(), -1));
    lua_pop(state_.L(), 1);
    if (hit == LimitHit::kInterrupted) {
      fatal_ = Status::Cancelled("interrupted");
    } else if (hit != LimitHit::kNone && (hit != LimitHit::kMemory || st == LUA_ERRMEM)) {
      // A coroutine stopped before it was resumed has no frames to show.
      const bool frames = c.traceback.find('\n') != std::string::npos;
      fatal_ = Status::ResourceExhausted(frames ? c.error + "\n" + c.traceback : c.error);
    }
  }
  std::vector<int> joiners = std::move(c.joiners);
  c.joiners.clear();
  for (int j : joiners) Wake(*coros_[j]);
}

Status Driver::WaitForProgress() {
  using Clock = std::chrono::steady_clock;
  std::vector<rt::VarId> vars;
  bool sleeping = false;
  Clock::time_point wake = Clock::time_point::max();
  for (const auto& c : coros_) {
    if (c->status == CoStatus::kWaitVar) vars.push_back(c->var);
    if (c->status == CoStatus::kSleep) {
      sleeping = true;
      wake = std::min(wake, c->wake_at);
    }
  }
  // At most poll_ms, and no later than the first sleeper's time.
  int timeout_ms = options_.poll_ms;
  if (sleeping) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now()).count();
    timeout_ms = static_cast<int>(std::clamp<decltype(left)>(left, 0, options_.poll_ms));
  }
  // Someone must wait for a variable the runtime will produce by itself;
  // a variable only the program sets (braid.map's output) is produced once
  // the coroutine setting it can go on.
  if (run_.AnySettles(vars)) {
    Waiting waiting(state_);  // waiting for the model: not the script's time
    run_.WaitAny(vars, timeout_ms);
  } else if (sleeping && timeout_ms > 0) {
    Waiting waiting(state_);  // a sleep stands for a tool's time: not the script's either
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  }
  bool woke = false;
  const Clock::time_point now = Clock::now();
  for (const auto& c : coros_) {
    if ((c->status == CoStatus::kWaitVar && run_.state(c->var) != rt::VarState::kPending) ||
        (c->status == CoStatus::kSleep && c->wake_at <= now)) {
      Wake(*c);
      woke = true;
    }
  }
  if (!woke && !sleeping && !run_.AnySettles(vars)) {
    std::string who;
    for (const auto& c : coros_)
      if (c->status == CoStatus::kWaitJoin || c->status == CoStatus::kWaitVar)
        who += (who.empty() ? "" : ", ") + c->path +
               (c->status == CoStatus::kWaitJoin ? " joins " + coros_[c->join_target]->path
                                                 : " awaits " + VarName(c->var));
    return Status::InvalidArgument(
        "deadlock: every coroutine is waiting and none waits for a "
        "variable the runtime will produce (" +
        who + ")");
  }
  return Status::Ok();
}

void Driver::FinishLeftovers() {
  auto unfinished = [&] {
    for (const auto& c : coros_)
      if (c->status != CoStatus::kDone && c->status != CoStatus::kFailed) return true;
    return false;
  };
  if (options_.on_return == DriverOptions::OnReturn::kWait) {
    // Coroutines first (they may make more calls), then the calls.
    while (fatal_.ok() && unfinished()) {
      while (!runnable_.empty() && fatal_.ok()) {
        int id = runnable_.front();
        runnable_.pop_front();
        Step(id);
      }
      if (!fatal_.ok() || !unfinished()) break;
      if (state_.interrupted()) {
        fatal_ = Status::Cancelled("interrupted");
        return;
      }
      if (!WaitForProgress().ok()) break;  // what is left can never finish
    }
    while (fatal_.ok()) {
      std::vector<rt::NodeInfo> left = run_.Outstanding();
      if (left.empty()) break;
      if (state_.interrupted()) {
        fatal_ = Status::Cancelled("interrupted");
        return;
      }
      std::vector<rt::VarId> outs;
      for (const auto& n : left) outs.push_back(n.outputs[0]);
      Waiting waiting(state_);
      run_.WaitAny(outs, options_.poll_ms);
    }
  }
  if (!fatal_.ok()) return;
  std::string names;
  for (const auto& c : coros_) {
    if (c->status == CoStatus::kDone || c->status == CoStatus::kFailed) continue;
    names += (names.empty() ? "" : ", ") + std::string("coroutine ") + c->path;
    if (c->status == CoStatus::kWaitVar) names += " (awaiting " + VarName(c->var) + ")";
    if (c->status == CoStatus::kWaitJoin)
      names += " (joining " + coros_[c->join_target]->path + ")";
    if (c->status == CoStatus::kSleep) names += " (in braid.sleep)";
  }
  for (const auto& n : run_.Outstanding())
    names += (names.empty() ? "" : ", ") + n.label + "#" + std::to_string(n.id);
  if (!names.empty())
    state_.Log("braid: warning: the program returned with work pending; cancelled: " + names);
}

Status Driver::Open() {
  if (opened_) return Status::Ok();
  lua_State* L = state_.L();
  lua_pushcfunction(L, OpenBraid);
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
    std::string msg = ErrorText(L);
    lua_pop(L, 1);
    return Status::Internal("opening the braid module: " + msg);
  }
  opened_ = true;
  return Status::Ok();
}

Result<ProgramResult> Driver::Execute(const std::string& chunkname, const std::string& source,
                                      const std::vector<std::string>& args) {
  Working working(state_);  // the clock of --lua-seconds runs until the end
  args_ = args;
  lua_State* L = state_.L();
  BRAID_RETURN_IF_ERROR(Open());
  if (!state_.LoadText(source, chunkname)) {
    std::string msg = ErrorText(L);
    lua_pop(L, 1);
    return Status::InvalidArgument(msg);
  }
  // The main coroutine: main_body(chunk, args...).
  if (!lua_checkstack(L, static_cast<int>(args.size()) + 4))
    return Status::InvalidArgument("too many program arguments");
  PushMainBody(L);
  lua_insert(L, -2);
  for (const std::string& a : args) lua_pushlstring(L, a.data(), a.size());
  std::string error;
  if (Spawn(L, 1 + static_cast<int>(args.size()), false, &error) < 0)
    return Status::Internal(error);

  Coroutine& main = *coros_[0];
  RunUntil([&] {
    if (main.status == CoStatus::kDone) FinishLeftovers();
    return main.status == CoStatus::kDone || main.status == CoStatus::kFailed;
  });
  return MainResult();
}

void Driver::RunUntil(const std::function<bool()>& done) {
  while (true) {
    while (!runnable_.empty() && fatal_.ok()) {
      const int id = runnable_.front();
      runnable_.pop_front();
      Step(id);
    }
    if (!fatal_.ok() || done()) return;
    if (state_.interrupted()) {
      fatal_ = Status::Cancelled("interrupted");
      return;
    }
    Status s = WaitForProgress();
    if (!s.ok()) {
      fatal_ = s;
      return;
    }
  }
}

Result<ProgramResult> Driver::MainResult() {
  if (!fatal_.ok()) return fatal_;
  Coroutine& main = *coros_[0];
  if (main.status == CoStatus::kFailed)
    return Status::InvalidArgument(main.error + "\n" + main.traceback);
  for (const auto& c : coros_) {
    if (c->status == CoStatus::kFailed && !c->background && !c->error_seen)
      return Status::InvalidArgument("coroutine " + c->path + " failed and was never joined: " +
                                     c->error + "\n" + c->traceback);
  }
  ProgramResult result;
  if (main.nresults == 0) return result;
  lua_State* L = state_.L();
  if (!lua_checkstack(L, 8)) return Status::ResourceExhausted("no Lua stack left for the result");
  lua_rawgeti(L, LUA_REGISTRYINDEX, main.results_ref);
  lua_rawgeti(L, -1, 1);
  lua_remove(L, -2);
  struct Pop {
    lua_State* L;
    ~Pop() { lua_pop(L, 1); }
  } pop{L};
  int t = lua_type(L, -1);
  if (t == LUA_TNIL) return result;
  if (t == LUA_TSTRING) {
    size_t len = 0;
    const char* s = lua_tolstring(L, -1, &len);
    result.kind = ProgramResult::Kind::kString;
    result.text.assign(s, len);
    return result;
  }
  nlohmann::json j;
  std::string err;
  // The JSON text may repeat one Lua string many times: bound its size by the
  // memory cap too.
  size_t budget = options_.limits.memory_bytes ? options_.limits.memory_bytes : SIZE_MAX;
  if (!ToJson(L, -1, 0, "", &j, &err, &budget)) return Status::InvalidArgument(err);
  result.kind = ProgramResult::Kind::kJson;
  result.text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return result;
}

bool Driver::IsIncomplete(const std::string& message) {
  static constexpr std::string_view kEof = "<eof>";
  return message.size() >= kEof.size() &&
         message.compare(message.size() - kEof.size(), kEof.size(), kEof) == 0;
}

namespace {

// tostring of each value of the list at index 1 (its length at index 2),
// one string each; run under lua_pcall (a __tostring may raise).
int FormatValues(lua_State* L) {
  const int n = static_cast<int>(lua_tointeger(L, 2));
  luaL_checkstack(L, n + 2, "too many results to print");
  for (int i = 1; i <= n; ++i) {
    lua_rawgeti(L, 1, i);
    luaL_tolstring(L, -1, nullptr);
    lua_remove(L, -2);
  }
  return n;
}

}  // namespace

// "input3": the number the input runs under (coroutine repl/3), so that
// functions defined in different inputs get different names (fn@input3:1).
std::string Driver::InputName(const std::string& chunkname) const {
  return chunkname.empty() ? "input" + std::to_string(inputs_ + 1) : chunkname;
}

Result<std::vector<std::string>> Driver::Evaluate(const std::string& chunkname,
                                                  const std::string& source) {
  lua_State* L = state_.L();
  BRAID_RETURN_IF_ERROR(Open());
  state_.ResetLimits();
  Working working(state_);
  fatal_ = Status::Ok();
  const std::string name = InputName(chunkname);
  if (!state_.LoadText("return " + source, name)) {
    // Not an expression: a statement, or the start of either ("1 +" is an
    // expression left open, "x =" a statement left open).
    std::string as_expression = ErrorText(L);
    lua_pop(L, 1);
    if (!state_.LoadText(source, name)) {
      std::string msg = ErrorText(L);
      lua_pop(L, 1);
      if (!IsIncomplete(msg) && IsIncomplete(as_expression)) msg = std::move(as_expression);
      // A finished input with a syntax error uses up the number its error
      // named; one that ended too early comes back with more lines.
      if (chunkname.empty() && !IsIncomplete(msg)) ++inputs_;
      return Status::InvalidArgument(msg);
    }
  }
  PushReplBody(L);
  lua_insert(L, -2);
  return RunInput(1);
}

Result<std::vector<std::string>> Driver::EvaluateProgram(const std::string& chunkname,
                                                         const std::string& source,
                                                         const std::vector<std::string>& args) {
  lua_State* L = state_.L();
  BRAID_RETURN_IF_ERROR(Open());
  state_.ResetLimits();
  Working working(state_);
  fatal_ = Status::Ok();
  if (!state_.LoadText(source, InputName(chunkname))) {
    std::string msg = ErrorText(L);
    lua_pop(L, 1);
    if (chunkname.empty()) ++inputs_;  // its number was in the error
    return Status::InvalidArgument(msg);
  }
  if (!lua_checkstack(L, static_cast<int>(args.size()) + 4)) {
    lua_pop(L, 1);
    return Status::InvalidArgument("too many program arguments");
  }
  PushMainBody(L);
  lua_insert(L, -2);
  for (const std::string& a : args) lua_pushlstring(L, a.data(), a.size());
  return RunInput(1 + static_cast<int>(args.size()));
}

Result<std::vector<std::string>> Driver::RunInput(int nargs) {
  lua_State* L = state_.L();
  top_path_ = "repl/" + std::to_string(++inputs_);
  std::string error;
  const int id = Spawn(L, nargs, false, &error);
  top_path_ = "main";
  if (id < 0) return Status::ResourceExhausted(error);
  Coroutine& c = *coros_[static_cast<size_t>(id)];
  RunUntil([&] { return c.status == CoStatus::kDone || c.status == CoStatus::kFailed; });
  if (!fatal_.ok()) {
    // The input stops here; the state and the other coroutines stay.
    if (c.status != CoStatus::kDone && c.status != CoStatus::kFailed) {
      c.status = CoStatus::kFailed;
      c.error = fatal_.message();
    }
    c.error_seen = true;
    Status s = fatal_;
    fatal_ = Status::Ok();
    return s;
  }
  if (c.status == CoStatus::kFailed) {
    c.error_seen = true;
    return Status::InvalidArgument(c.error + "\n" + c.traceback);
  }
  std::vector<std::string> out;
  if (c.nresults == 0) return out;
  if (!lua_checkstack(L, 4)) return Status::ResourceExhausted("no Lua stack left for the result");
  const int base = lua_gettop(L);
  lua_pushcfunction(L, FormatValues);
  lua_rawgeti(L, LUA_REGISTRYINDEX, c.results_ref);
  lua_pushinteger(L, c.nresults);
  state_.BeginSlice(L);
  const int rc = lua_pcall(L, 2, LUA_MULTRET, 0);
  state_.EndSlice();
  if (rc != LUA_OK) {
    std::string text = ErrorText(L);
    lua_settop(L, base);
    return Status::InvalidArgument("printing the result: " + text);
  }
  for (int i = base + 1; i <= lua_gettop(L); ++i) {
    size_t len = 0;
    const char* p = lua_tolstring(L, i, &len);
    out.emplace_back(p, len);
  }
  lua_settop(L, base);
  // Tables print as JSON (variables in them as their values), as braid run
  // prints a result, when they are plain data.
  lua_rawgeti(L, LUA_REGISTRYINDEX, c.results_ref);
  for (int i = 1; i <= c.nresults && i <= static_cast<int>(out.size()); ++i) {
    lua_rawgeti(L, -1, i);
    if (lua_type(L, -1) == LUA_TTABLE) {
      nlohmann::json j;
      std::string err;
      size_t budget = options_.limits.memory_bytes ? options_.limits.memory_bytes : SIZE_MAX;
      if (ToJson(L, -1, 0, "", &j, &err, &budget))
        out[static_cast<size_t>(i - 1)] =
            j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return out;
}

}  // namespace braid::lua
