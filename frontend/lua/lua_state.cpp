#include "lua/lua_state.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

namespace braid::lua {
namespace {

char host_yield_tag;

// The sandbox, applied once by running this chunk with the host-yield tag as
// its argument. It only reshapes globals; every refusal names what was
// refused. Written in Lua because it is mostly table surgery.
const char* kSandboxLua = R"lua(
local tag = ...
local error, type, rawget, select = error, type, rawget, select

-- os: only clock and calendar functions (the host may replace them with
-- replayable versions).
os = { time = os.time, clock = os.clock, date = os.date, difftime = os.difftime }
string.dump = nil

local removed = { io = true, debug = true, package = true, require = true,
                  dofile = true, loadfile = true, loadstring = true, module = true }
for k in pairs(removed) do _G[k] = nil end

local raw_load = load
load = function(chunk, name, mode, ...)
  if mode ~= nil and mode ~= "t" then
    error("load: only text chunks (mode \"t\") are allowed in the Braid sandbox", 2)
  end
  return raw_load(chunk, name, "t", ...)
end

local raw_collect = collectgarbage
collectgarbage = function(opt, ...)
  if opt == "count" then return raw_collect("count") end
  error("collectgarbage: only \"count\" is allowed in the Braid sandbox", 2)
end

local raw_setmetatable = setmetatable
setmetatable = function(t, mt)
  if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
    error("setmetatable: __gc metamethods are not allowed in the Braid sandbox", 2)
  end
  return raw_setmetatable(t, mt)
end

-- Host yields (first value `tag`) travel up through coroutines the script
-- created, to the host's coroutine; the host's answer travels back down.
local create, resume, yield, status = coroutine.create, coroutine.resume,
                                       coroutine.yield, coroutine.status
local pack, unpack = table.pack, table.unpack
local function pass_up(co, r)
  while r[1] and r[2] == tag and status(co) == "suspended" do
    r = pack(resume(co, yield(tag)))
  end
  return r
end
coroutine.resume = function(co, ...)
  local r = pass_up(co, pack(resume(co, ...)))
  return unpack(r, 1, r.n)
end
coroutine.wrap = function(f)
  local co = create(f)
  return function(...)
    local r = pass_up(co, pack(resume(co, ...)))
    if not r[1] then error(r[2], 0) end
    return unpack(r, 2, r.n)
  end
end

raw_setmetatable(_G, { __index = function(_, k)
  if removed[k] then error("'" .. k .. "' is not available in the Braid sandbox", 2) end
  return nil
end })
)lua";

// print(...): tostring of each argument, tab-separated, as one log line.
int LuaPrint(lua_State* L) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; ++i) {
    if (i > 1) luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, nullptr);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  size_t len = 0;
  const char* s = lua_tolstring(L, -1, &len);
  LuaState* state = LuaState::From(L);
  state->EnterHost();
  state->Log(std::string_view(s, len));
  state->LeaveHost();
  return 0;
}

int Panic(lua_State* L) {
  const char* msg = lua_tostring(L, -1);
  std::fprintf(stderr, "braid: unprotected Lua error (a bug in braid): %s\n", msg ? msg : "?");
  std::abort();
}

}  // namespace

void* LuaState::HostYieldTag() { return &host_yield_tag; }

LuaState::LuaState(const LuaLimits& limits) : limits_(limits) {}

LuaState::~LuaState() {
  if (L_) lua_close(L_);
}

std::unique_ptr<LuaState> LuaState::Create(const LuaLimits& limits) {
  std::unique_ptr<LuaState> s(new LuaState(limits));
  s->L_ = lua_newstate(&LuaState::Alloc, s.get());
  if (!s->L_) return nullptr;
  lua_atpanic(s->L_, Panic);
  s->OpenSandbox();
  return s;
}

LuaState* LuaState::From(lua_State* L) {
  void* ud = nullptr;
  lua_getallocf(L, &ud);
  return static_cast<LuaState*>(ud);
}

void* LuaState::Alloc(void* ud, void* ptr, size_t osize, size_t nsize) {
  auto* s = static_cast<LuaState*>(ud);
  // osize is the old block size only when ptr != NULL (else a type tag).
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    std::free(ptr);
    s->mem_used_ -= old;
    return nullptr;
  }
  if (nsize > old && s->limits_.memory_bytes && s->host_depth_ == 0 &&
      s->mem_used_ - old + nsize > s->limits_.memory_bytes) {
    if (s->hit_ == LimitHit::kNone) s->hit_ = LimitHit::kMemory;
    return nullptr;  // Lua raises "not enough memory"
  }
  void* p = std::realloc(ptr, nsize);
  if (!p) return nullptr;
  s->mem_used_ = s->mem_used_ - old + nsize;
  return p;
}

void LuaState::OpenSandbox() {
  // Host section: nothing below can hit the cap.
  static const luaL_Reg kLibs[] = {
      {LUA_GNAME, luaopen_base},          {LUA_COLIBNAME, luaopen_coroutine},
      {LUA_TABLIBNAME, luaopen_table},    {LUA_STRLIBNAME, luaopen_string},
      {LUA_MATHLIBNAME, luaopen_math},    {LUA_UTF8LIBNAME, luaopen_utf8},
      {LUA_OSLIBNAME, luaopen_os},        {nullptr, nullptr}};
  for (const luaL_Reg* lib = kLibs; lib->func; ++lib) {
    luaL_requiref(L_, lib->name, lib->func, 1);
    lua_pop(L_, 1);
  }
  // luaL_requiref records libraries in package.loaded (a registry table);
  // there is no `package` global, so scripts cannot reach it.
  lua_pushcfunction(L_, LuaPrint);
  lua_setglobal(L_, "print");
  if (luaL_loadbufferx(L_, kSandboxLua, std::strlen(kSandboxLua), "=sandbox", "t") != LUA_OK ||
      (lua_pushlightuserdata(L_, HostYieldTag()), lua_pcall(L_, 1, 0, 0)) != LUA_OK) {
    std::fprintf(stderr, "braid: sandbox setup failed: %s\n", lua_tostring(L_, -1));
    std::abort();  // our own chunk: a bug, never bad input
  }
  lua_sethook(L_, &LuaState::Hook, LUA_MASKCOUNT, kHookEvery);
}

void LuaState::Log(std::string_view line) const {
  if (logger_) {
    logger_(line);
  } else {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  }
}

void LuaState::BeginSlice() {
  in_slice_ = true;
  slice_start_ = std::chrono::steady_clock::now();
  --host_depth_;
}

void LuaState::EndSlice() {
  ++host_depth_;
  cpu_before_slice_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - slice_start_).count();
  in_slice_ = false;
}

double LuaState::cpu_seconds_used() const {
  double t = cpu_before_slice_;
  if (in_slice_) t += std::chrono::duration<double>(std::chrono::steady_clock::now() - slice_start_).count();
  return t;
}

std::string LuaState::LimitMessage() const {
  char buf[256];
  switch (hit_) {
    case LimitHit::kNone:
      return "";
    case LimitHit::kMemory:
      std::snprintf(buf, sizeof buf, "memory limit: the script needed more than %zu MB (--lua-memory-mb)",
                    limits_.memory_bytes >> 20);
      return buf;
    case LimitHit::kInstructions:
      std::snprintf(buf, sizeof buf, "instruction limit: the script ran more than %llu Lua instructions (--lua-instructions)",
                    static_cast<unsigned long long>(limits_.max_instructions));
      return buf;
    case LimitHit::kTime:
      std::snprintf(buf, sizeof buf, "time limit: the script ran Lua code for more than %g s (--lua-seconds)",
                    limits_.cpu_seconds);
      return buf;
    case LimitHit::kInterrupted:
      return "interrupted";
  }
  return "";
}

// The count hook. No C++ object with a destructor lives in this frame: it may
// raise.
void LuaState::Hook(lua_State* L, lua_Debug* ar) {
  LuaState* s = From(L);
  s->instructions_ += kHookEvery;
  if (s->hit_ == LimitHit::kNone) {
    if (s->interrupted()) {
      s->hit_ = LimitHit::kInterrupted;
    } else if (s->limits_.max_instructions && s->instructions_ > s->limits_.max_instructions) {
      s->hit_ = LimitHit::kInstructions;
    } else if (s->limits_.cpu_seconds > 0 && s->cpu_seconds_used() > s->limits_.cpu_seconds) {
      s->hit_ = LimitHit::kTime;
    }
  }
  if (s->hit_ == LimitHit::kNone || s->hit_ == LimitHit::kMemory) return;
  // From now on check at every instruction: a pcall cannot swallow this.
  lua_sethook(L, &LuaState::Hook, LUA_MASKCOUNT, 1);
  s->EnterHost();
  // Build the message into plain storage, then raise with no C++ temporaries alive.
  {
    std::string m = s->LimitMessage();
    std::snprintf(s->hit_message_, sizeof s->hit_message_, "%s", m.c_str());
  }
  luaL_where(L, 0);
  lua_pushstring(L, s->hit_message_);
  lua_concat(L, 2);
  s->LeaveHost();
  lua_error(L);
}

bool LuaState::LoadText(const std::string& source, const std::string& chunkname) {
  std::string name = "@" + chunkname;
  return luaL_loadbufferx(L_, source.data(), source.size(), name.c_str(), "t") == LUA_OK;
}

}  // namespace braid::lua
