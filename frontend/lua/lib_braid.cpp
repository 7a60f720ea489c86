// The braid module. Every lua_CFunction here follows the host-section rule
// of lua_state.h: argument checks (which may raise) first, with no C++
// object alive; then a lambda run through HostCall that may hold C++ objects
// but only calls raw, non-raising Lua API functions; then, with the lambda's
// frame gone, lua_error or lua_yieldk if it asked for one. Script data the
// host keeps (call inputs, join parts, values set) is charged to the memory
// cap (Charge).
#include "lua/lib_braid.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <random>
#include <string>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

#include "lua/chunker.h"
#include "lua/driver.h"
#include "lua/lib_json.h"
#include "lua/lua_state.h"

namespace braid::lua {
namespace {

constexpr int kRaise = -1;  // the lambda pushed an error message
constexpr int kYield = -2;  // the lambda blocked the coroutine; yield to the driver

const char* const kVarMeta = "braid.var";
const char* const kFnMeta = "braid.fn";
const char* const kHandleMeta = "braid.handle";
char main_body_key;
char map_body_key;
char repl_body_key;

struct VarUd {
  rt::VarId id;
};
struct FnUd {
  int index;
};
struct HandleUd {
  int id;
};

int PushError(lua_State* L, const std::string& msg);

constexpr int kOutOfMemory = -3;  // the lambda ran out of host memory

// Runs `impl` in a host section; raises if it returned kRaise. F must be a
// lambda capturing by reference (trivially destructible). A std::bad_alloc
// from the host's own copies becomes a Lua memory error once the lambda's
// frame is gone, so no C++ exception crosses into Lua. The limits are
// checked first (LuaState::AtHostCall): a program that spends its time in
// host calls, with few Lua instructions between them, stops at the next one.
template <typename F>
int HostCall(lua_State* L, F&& impl) {
  if (!Driver::From(L)) return luaL_error(L, "braid: the program has ended");
  LuaState* s = LuaState::From(L);
  if (s->AtHostCall(L)) return s->StopForLimit(L);
  s->EnterHost();
  int r;
  try {
    r = impl();
  } catch (const std::bad_alloc&) {
    r = kOutOfMemory;
  }
  s->LeaveHost();
  if (r == kRaise) return lua_error(L);
  if (r == kOutOfMemory) return luaL_error(L, "out of memory copying script data");
  return r;
}

// Counts `bytes` of script data the host is about to keep against the
// memory cap; false (with the error pushed) when over it.
bool Charge(lua_State* L, size_t bytes) {
  LuaState* s = LuaState::From(L);
  if (s->ChargeHost(bytes)) return true;
  PushError(L, s->LimitMessage());
  return false;
}

// Pushes "FILE:LINE: msg" (position of the calling Lua code); returns kRaise.
int PushError(lua_State* L, const std::string& msg) {
  luaL_where(L, 1);
  lua_pushlstring(L, msg.data(), msg.size());
  lua_concat(L, 2);
  return kRaise;
}

void PushVar(lua_State* L, rt::VarId id) {
  auto* ud = static_cast<VarUd*>(lua_newuserdatauv(L, sizeof(VarUd), 0));
  ud->id = id;
  luaL_setmetatable(L, kVarMeta);
}

VarUd* TestVar(lua_State* L, int idx) {
  return static_cast<VarUd*>(luaL_testudata(L, idx, kVarMeta));
}

VarUd* CheckVar(lua_State* L, int idx) {
  return static_cast<VarUd*>(luaL_checkudata(L, idx, kVarMeta));
}

const char* TypeName(lua_State* L, int idx) { return luaL_typename(L, idx); }

// A template input or join part: a string, a number or a variable.
bool ToArg(lua_State* L, int idx, rt::Arg* out) {
  int t = lua_type(L, idx);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    lua_pushvalue(L, idx);  // tolstring converts numbers in place: work on a copy
    size_t len = 0;
    const char* s = lua_tolstring(L, -1, &len);
    *out = rt::Arg::Text(std::string(s, len));
    lua_pop(L, 1);
    return true;
  }
  if (VarUd* v = TestVar(L, idx)) {
    *out = rt::Arg::Var(v->id);
    return true;
  }
  return false;
}

// The outputs of the table a call returned, "summary, title" ("" for any
// other value): what a script meant to pass instead of the whole table.
std::string OutputsOf(lua_State* L, int idx) {
  if (lua_type(L, idx) != LUA_TTABLE || luaL_getmetafield(L, idx, "__name") == LUA_TNIL) return "";
  const bool outputs =
      lua_type(L, -1) == LUA_TSTRING && !std::strcmp(lua_tostring(L, -1), "braid.outputs");
  lua_pop(L, 1);
  if (!outputs) return "";
  std::vector<std::string> names;
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) names.emplace_back(lua_tostring(L, -1));
  }
  std::sort(names.begin(), names.end());  // the table's order is the hash's
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return list;
}

// " (a call's table of outputs: ...)" for the table a call returned, where
// a string or a variable was expected; else "".
std::string OutputsHint(lua_State* L, int idx) {
  const std::string outputs = OutputsOf(L, idx);
  if (outputs.empty()) return "";
  return " (the table of outputs a call returns: pass one of them, ." +
         outputs.substr(0, outputs.find(',')) + ", not the table; outputs: " + outputs + ")";
}

// ---- braid.fn ----------------------------------------------------------------

// Checks braid.fn's `messages` field at `idx`: nil, or a list of tables
// { role = "system"|"user"|"assistant", content = string }. Raises naming
// the item and what is wrong. (Raw reads, so that what is checked here is
// what LuaFnNew's host section reads.)
void CheckMessages(lua_State* L, int idx) {
  if (lua_isnil(L, idx)) return;
  if (lua_type(L, idx) != LUA_TTABLE)
    luaL_error(L, "braid.fn: field 'messages' must be a list of {role=, content=} tables, got %s",
               TypeName(L, idx));
  const lua_Unsigned n = lua_rawlen(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    const bool listed = lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1 &&
                        static_cast<lua_Unsigned>(lua_tointeger(L, -1)) <= n;
    if (!listed) {
      const bool text = lua_type(L, -1) == LUA_TSTRING;
      luaL_error(L,
                 "braid.fn: field 'messages' must be a list of {role=, content=} tables, but it "
                 "has the key %s%s%s",
                 text ? "'" : "", luaL_tolstring(L, -1, nullptr), text ? "'" : "");
    }
  }
  for (lua_Unsigned i = 1; i <= n; ++i) {
    const int item = lua_gettop(L) + 1;
    lua_rawgeti(L, idx, static_cast<lua_Integer>(i));
    if (lua_type(L, item) != LUA_TTABLE)
      luaL_error(L, "braid.fn: messages[%d] must be a table {role=, content=}, got %s",
                 static_cast<int>(i), TypeName(L, item));
    lua_pushnil(L);
    while (lua_next(L, item)) {
      lua_pop(L, 1);
      const char* k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : nullptr;
      if (!k || (std::strcmp(k, "role") && std::strcmp(k, "content")))
        luaL_error(L, "braid.fn: messages[%d]: unknown field '%s' (fields: role, content)",
                   static_cast<int>(i), k ? k : luaL_typename(L, -1));
    }
    lua_pushliteral(L, "role");
    lua_rawget(L, item);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "braid.fn: messages[%d]: 'role' must be a string, got %s", static_cast<int>(i),
                 TypeName(L, -1));
    const char* role = lua_tostring(L, -1);
    if (std::strcmp(role, "system") && std::strcmp(role, "user") && std::strcmp(role, "assistant"))
      luaL_error(L, "braid.fn: messages[%d]: role '%s' is not one of system, user, assistant",
                 static_cast<int>(i), role);
    lua_pushliteral(L, "content");
    lua_rawget(L, item);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "braid.fn: messages[%d]: 'content' must be a string, got %s",
                 static_cast<int>(i), TypeName(L, -1));
    lua_settop(L, item - 1);
  }
}

int LuaOutputsIndex(lua_State* L);

int LuaFnNew(lua_State* L) {
  // Stack after the checks: 1 spec, 2 prompt, 3 system, 4 name, 5 messages,
  // 6 default name.
  if (lua_type(L, 1) == LUA_TSTRING) {
    lua_settop(L, 1);
    lua_pushvalue(L, 1);
    lua_pushliteral(L, "");
    lua_pushnil(L);
    lua_pushnil(L);
  } else if (lua_type(L, 1) == LUA_TTABLE) {
    lua_settop(L, 1);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
      lua_pop(L, 1);
      const char* k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : nullptr;
      if (!k || (std::strcmp(k, "prompt") && std::strcmp(k, "system") && std::strcmp(k, "name") &&
                 std::strcmp(k, "messages") && std::strcmp(k, "lazy")))
        return luaL_error(
            L, "braid.fn: unknown field '%s' (fields: name, system, messages, prompt, lazy)",
            k ? k : luaL_typename(L, -1));
    }
    lua_getfield(L, 1, "prompt");
    if (lua_type(L, 2) != LUA_TSTRING)
      return luaL_error(L, "braid.fn: the table needs a string field 'prompt'");
    lua_getfield(L, 1, "system");
    if (lua_isnil(L, 3)) {
      lua_pop(L, 1);
      lua_pushliteral(L, "");
    } else if (lua_type(L, 3) != LUA_TSTRING) {
      return luaL_error(L, "braid.fn: field 'system' must be a string, got %s", TypeName(L, 3));
    }
    lua_getfield(L, 1, "name");
    if (!lua_isnil(L, 4) && lua_type(L, 4) != LUA_TSTRING)
      return luaL_error(L, "braid.fn: field 'name' must be a string, got %s", TypeName(L, 4));
    lua_getfield(L, 1, "messages");
    CheckMessages(L, 5);
  } else {
    return luaL_error(L,
                      "braid.fn: expected a template string or a table {name=, system=, messages=, "
                      "prompt=}, got %s",
                      TypeName(L, 1));
  }
  bool lazy = false;
  if (lua_type(L, 1) == LUA_TTABLE) {
    lua_getfield(L, 1, "lazy");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
      return luaL_error(L, "braid.fn: field 'lazy' must be a boolean, got %s", TypeName(L, -1));
    lazy = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  luaL_where(L, 1);  // default name: where braid.fn was called
  return HostCall(L, [L, lazy]() {
    Driver* d = Driver::From(L);
    size_t len = 0;
    rt::FunctionSpec spec;
    spec.lazy = lazy;
    const char* p = lua_tolstring(L, 2, &len);
    spec.prompt.assign(p, len);
    p = lua_tolstring(L, 3, &len);
    spec.system.assign(p, len);
    if (lua_type(L, 5) == LUA_TTABLE) {  // checked by CheckMessages
      const lua_Unsigned n = lua_rawlen(L, 5);
      for (lua_Unsigned i = 1; i <= n; ++i) {
        lua_rawgeti(L, 5, static_cast<lua_Integer>(i));
        ChatMessage m;
        lua_pushliteral(L, "role");
        lua_rawget(L, -2);
        p = lua_tolstring(L, -1, &len);
        m.role.assign(p, len);
        lua_pushliteral(L, "content");
        lua_rawget(L, -3);
        p = lua_tolstring(L, -1, &len);
        m.content.assign(p, len);
        lua_pop(L, 3);
        spec.messages.push_back(std::move(m));
      }
    }
    if (lua_type(L, 4) == LUA_TSTRING) {
      p = lua_tolstring(L, 4, &len);
      spec.name.assign(p, len);
    } else {
      // "fn@FILE:LINE" of the braid.fn call.
      p = lua_tolstring(L, 6, &len);
      std::string where(p, len);
      while (!where.empty() && (where.back() == ' ' || where.back() == ':')) where.pop_back();
      spec.name = where.empty() ? "fn" : "fn@" + where;
    }
    auto fn = rt::SemanticFunction::Parse(spec);
    if (!fn.ok()) return PushError(L, "braid.fn: " + fn.status().message());
    int index = d->AddFunction(std::move(fn).value());
    if (index < 0) return PushError(L, "braid.fn: too many functions in one program");
    auto* ud = static_cast<FnUd*>(lua_newuserdatauv(L, sizeof(FnUd), 1));
    ud->index = index;
    luaL_setmetatable(L, kFnMeta);
    // The metatable of the tables its calls return (user value 1): reading
    // an output it does not have raises, naming the ones it has.
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, index);
    lua_pushcclosure(L, LuaOutputsIndex, 1);
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "braid.outputs");
    lua_setfield(L, -2, "__name");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_setiuservalue(L, -2, 1);
    return 1;
  });
}

// __index of a call's table of outputs, for a name it does not hold:
// `f{...}.text` where the output is `out`, or `f{...}:get()`.
int LuaOutputsIndex(lua_State* L) {
  if (lua_type(L, 2) != LUA_TSTRING) return 0;  // t[1] and the like: nil, as for any table
  const int index = static_cast<int>(lua_tointeger(L, lua_upvalueindex(1)));
  return HostCall(L, [L, index]() {
    const rt::SemanticFunction* fn = Driver::From(L)->function(index);
    std::string outputs;
    for (const rt::OutputSpec& o : fn->outputs()) outputs += (outputs.empty() ? "" : ", ") + o.name;
    const std::string key = lua_tostring(L, 2);
    const std::string& name = fn->spec().name;
    if (key == "get" || key == "state" || key == "scores")
      return PushError(L, "'" + key + "' is a method of variables, and " + name +
                              "{...} returns a table of its outputs: call it on one, e.g. " + name +
                              "{...}." + fn->outputs()[0].name + ":" + key +
                              "() (outputs: " + outputs + ")");
    return PushError(L, name + "{...} has no output '" + key + "' (outputs: " + outputs + ")");
  });
}

// fn{ input = value, ... } -> { output = variable, ... }
int LuaFnCall(lua_State* L) {
  auto* f = static_cast<FnUd*>(luaL_checkudata(L, 1, kFnMeta));
  if (!lua_isnoneornil(L, 2) && lua_type(L, 2) != LUA_TTABLE)
    return luaL_error(L, "call a braid function with a table of inputs, e.g. f{ text = s }, got %s",
                      TypeName(L, 2));
  lua_settop(L, 2);
  lua_getiuservalue(L, 1, 1);  // 3: the metatable of the outputs table
  int index = f->index;
  return HostCall(L, [L, index]() {
    Driver* d = Driver::From(L);
    const rt::SemanticFunction* fn = d->function(index);
    const std::string& name = fn->spec().name;
    std::map<std::string, rt::Arg> args;
    if (lua_type(L, 2) == LUA_TTABLE) {
      lua_pushnil(L);
      while (lua_next(L, 2)) {
        if (lua_type(L, -2) != LUA_TSTRING)
          return PushError(L, name + ": input names must be strings, got a " + TypeName(L, -2));
        std::string key = lua_tostring(L, -2);
        bool known = false;
        for (const std::string& in : fn->inputs()) known = known || in == key;
        if (!known) {
          std::string list;
          for (const std::string& in : fn->inputs()) list += (list.empty() ? "" : ", ") + in;
          return PushError(L, name + ": unknown input '" + key +
                                  "' (its inputs: " + (list.empty() ? "none" : list) + ")");
        }
        rt::Arg arg;
        if (!ToArg(L, -1, &arg))
          return PushError(L, name + ": input '" + key +
                                  "' must be a string or a braid variable, got " + TypeName(L, -1) +
                                  OutputsHint(L, -1));
        if (!Charge(L, arg.text.size())) return kRaise;
        args[key] = std::move(arg);
        lua_pop(L, 1);
      }
    }
    for (const std::string& in : fn->inputs())
      if (!args.count(in)) return PushError(L, name + ": missing input '" + in + "'");
    auto outs = d->run().Call(*fn, args, d->NextCallKey(), d->Reads());
    if (!outs.ok()) return PushError(L, name + ": " + outs.status().message());
    lua_createtable(L, 0, static_cast<int>(outs->size()));
    for (const auto& [out, var] : *outs) {
      d->NameVar(var, name + "." + out);
      lua_pushlstring(L, out.data(), out.size());
      PushVar(L, var);
      lua_rawset(L, -3);
    }
    lua_pushvalue(L, 3);
    lua_setmetatable(L, -2);
    return 1;
  });
}

int LuaFnToString(lua_State* L) {
  auto* f = static_cast<FnUd*>(luaL_checkudata(L, 1, kFnMeta));
  int index = f->index;
  return HostCall(L, [L, index]() {
    std::string s = "braid.fn(" + Driver::From(L)->function(index)->spec().name + ")";
    lua_pushlstring(L, s.data(), s.size());
    return 1;
  });
}

// ---- variables ---------------------------------------------------------------

// For a variable in `state`, not ready: raises when it failed or was
// cancelled, else blocks the current coroutine on it (kYield).
int RaiseOrBlock(lua_State* L, rt::VarId id, rt::VarState state, bool wanted) {
  Driver* d = Driver::From(L);
  if (state == rt::VarState::kFailed)
    return PushError(L, d->VarName(id) + " failed: " + d->run().error(id));
  if (state == rt::VarState::kCancelled) return PushError(L, d->VarName(id) + " was cancelled");
  d->BlockOnVar(id, wanted);
  return kYield;
}

// Pushes the value of a ready variable, raises for a failed or cancelled one,
// or blocks the current coroutine on it (kYield).
int CheckReady(lua_State* L, rt::VarId id, bool wanted) {
  Driver* d = Driver::From(L);
  rt::Run& run = d->run();
  const rt::VarState state = run.state(id);
  if (state != rt::VarState::kReady) return RaiseOrBlock(L, id, state, wanted);
  d->NoteRead(id);
  std::string v = run.value(id);
  lua_pushlstring(L, v.data(), v.size());
  return 1;
}

int VarGetK(lua_State* L, int status, lua_KContext ctx) {
  auto id = static_cast<rt::VarId>(ctx);
  int r = HostCall(L, [L, id]() { return CheckReady(L, id, true); });
  if (r != kYield) return r;
  lua_pushlightuserdata(L, LuaState::HostYieldTag());
  return lua_yieldk(L, 1, ctx, VarGetK);
}

int CheckYieldable(lua_State* L, const char* what) {
  if (!lua_isyieldable(L))
    return luaL_error(L,
                      "%s: cannot wait here (inside a metamethod or a C function such as "
                      "table.sort or string.gsub); wait outside it",
                      what);
  return 0;
}

// v:get{ criteria = "latency"|"throughput", deadline_ms = N }
int LuaVarGet(lua_State* L) {
  VarUd* v = CheckVar(L, 1);
  rt::GetOptions opts;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      lua_pop(L, 1);
      const char* k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : nullptr;
      if (!k || (std::strcmp(k, "criteria") && std::strcmp(k, "deadline_ms")))
        return luaL_error(L, "get: unknown option '%s' (options: criteria, deadline_ms)",
                          k ? k : luaL_typename(L, -1));
    }
    lua_getfield(L, 2, "criteria");
    if (!lua_isnil(L, -1)) {
      const char* c = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
      if (!std::strcmp(c, "latency")) {
        opts.criteria = rt::Criteria::kLatency;
      } else if (!std::strcmp(c, "throughput")) {
        opts.criteria = rt::Criteria::kThroughput;
      } else {
        return luaL_error(L, "get: criteria must be \"latency\" or \"throughput\", got %s",
                          luaL_tolstring(L, -1, nullptr));
      }
    }
    lua_getfield(L, 2, "deadline_ms");
    if (!lua_isnil(L, -1)) {
      int isnum = 0;
      double ms = lua_tonumberx(L, -1, &isnum);
      if (!isnum || !(ms > 0) || !std::isfinite(ms))
        return luaL_error(L, "get: deadline_ms must be a positive number of milliseconds");
      opts.deadline_ms = ms;
    }
  }
  CheckYieldable(L, "get");
  rt::VarId id = v->id;
  int r = HostCall(L, [L, id, &opts]() {
    Driver* d = Driver::From(L);
    Status s = d->run().Want(id, opts);
    if (!s.ok()) return PushError(L, "get " + d->VarName(id) + ": " + s.message());
    return CheckReady(L, id, true);
  });
  if (r != kYield) return r;
  lua_pushlightuserdata(L, LuaState::HostYieldTag());
  return lua_yieldk(L, 1, static_cast<lua_KContext>(id), VarGetK);
}

// Pushes the scores of a ready select output as { choice = log-probability },
// raises when `id` is not a select output, failed or has no scores, or
// blocks the current coroutine on it (kYield).
int CheckScores(lua_State* L, rt::VarId id) {
  Driver* d = Driver::From(L);
  rt::Run& run = d->run();
  auto scores = run.scores(id);
  if (scores.ok()) {
    d->NoteRead(id);  // the program may decide on them: a read, like get
    lua_createtable(L, 0, static_cast<int>(scores->size()));
    for (const auto& [choice, lp] : *scores) {
      lua_pushlstring(L, choice.data(), choice.size());
      lua_pushnumber(L, static_cast<lua_Number>(lp));
      lua_rawset(L, -3);
    }
    return 1;
  }
  if (scores.status().code() == StatusCode::kInvalidArgument)
    return PushError(L, "scores: " + d->VarName(id) +
                            " is not a select output (only {{select ...}} outputs have scores)");
  const rt::VarState state = run.state(id);
  if (state == rt::VarState::kReady)
    return PushError(L, "scores: " + d->VarName(id) + ": " + scores.status().message());
  return RaiseOrBlock(L, id, state, /*wanted=*/true);
}

int VarScoresK(lua_State* L, int status, lua_KContext ctx) {
  auto id = static_cast<rt::VarId>(ctx);
  int r = HostCall(L, [L, id]() { return CheckScores(L, id); });
  if (r != kYield) return r;
  lua_pushlightuserdata(L, LuaState::HostYieldTag());
  return lua_yieldk(L, 1, ctx, VarScoresK);
}

// v:scores(): waits like v:get() (with the default goal), then returns the
// log-probability of each choice of the select output v.
int LuaVarScores(lua_State* L) {
  VarUd* v = CheckVar(L, 1);
  CheckYieldable(L, "scores");
  rt::VarId id = v->id;
  int r = HostCall(L, [L, id]() {
    Driver* d = Driver::From(L);
    // Not a select output: say so now rather than after computing it.
    if (d->run().scores(id).status().code() != StatusCode::kInvalidArgument) {
      Status s = d->run().Want(id, rt::GetOptions{});
      if (!s.ok()) return PushError(L, "scores " + d->VarName(id) + ": " + s.message());
    }
    return CheckScores(L, id);
  });
  if (r != kYield) return r;
  lua_pushlightuserdata(L, LuaState::HostYieldTag());
  return lua_yieldk(L, 1, static_cast<lua_KContext>(id), VarScoresK);
}

const char* StateName(rt::VarState s) {
  switch (s) {
    case rt::VarState::kPending:
      return "pending";
    case rt::VarState::kReady:
      return "ready";
    case rt::VarState::kFailed:
      return "failed";
    case rt::VarState::kCancelled:
      return "cancelled";
  }
  return "?";
}

int LuaVarState(lua_State* L) {
  VarUd* v = CheckVar(L, 1);
  rt::VarId id = v->id;
  return HostCall(L, [L, id]() {
    lua_pushstring(L, StateName(Driver::From(L)->run().state(id)));
    return 1;
  });
}

int LuaVarToString(lua_State* L) {
  VarUd* v = CheckVar(L, 1);
  rt::VarId id = v->id;
  return HostCall(L, [L, id]() {
    Driver* d = Driver::From(L);
    std::string s = "braid.var(" + d->VarName(id) + " #" + std::to_string(id) + ", " +
                    StateName(d->run().state(id)) + ")";
    lua_pushlstring(L, s.data(), s.size());
    return 1;
  });
}

int LuaVarConcat(lua_State* L) {
  return luaL_error(
      L, "cannot concatenate a braid variable: call :get() for its value, or use braid.join");
}

// __index of variables: the methods (upvalue 1), else an error naming the
// variable, e.g. for a string method called on it (v:lower(), v:find()).
int LuaVarIndex(lua_State* L) {
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  const rt::VarId id = CheckVar(L, 1)->id;
  return HostCall(L, [L, id]() {
    const std::string v = Driver::From(L)->VarName(id);
    const bool named = lua_type(L, 2) == LUA_TSTRING || lua_type(L, 2) == LUA_TNUMBER;
    const std::string key = named ? lua_tostring(L, 2) : TypeName(L, 2);
    // A string method (Lua's string library): the script meant the text.
    static const char* const kStringMethods[] = {"byte", "find",    "format", "gmatch",
                                                 "gsub", "len",     "lower",  "match",
                                                 "rep",  "reverse", "sub",    "upper"};
    bool string_method = false;
    for (const char* m : kStringMethods) string_method = string_method || key == m;
    if (string_method && lua_type(L, 2) == LUA_TSTRING)
      return PushError(L,
                       v + " is a braid variable, not a string: call :get() for its text, e.g. " +
                           "v:get():" + key + "(...)");
    return PushError(L, v + " is a braid variable: it has no field '" + key +
                            "' (its methods: get, state, scores)");
  });
}

// Operators on a variable (upvalue 1: how the operator reads): the script
// meant its value. (`v == "text"` cannot be caught: Lua compares a userdata
// with a string without asking any metamethod; see docs/lua-dsl.md.)
int LuaVarOperator(lua_State* L) {
  const int at = TestVar(L, 1) ? 1 : 2;
  const rt::VarId id = CheckVar(L, at)->id;
  return HostCall(L, [L, id]() {
    const std::string v = Driver::From(L)->VarName(id);
    const std::string op = lua_tostring(L, lua_upvalueindex(1));
    return PushError(L, "cannot " + op + " " + v +
                            ", a braid variable (a value to come): use its value, v:get()" +
                            (op == "compare" ? " (rawequal(a, b) tells whether two variables are "
                                               "the same one)"
                                             : ""));
  });
}

// ---- spawn / join --------------------------------------------------------------

int LuaSpawn(lua_State* L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  int n = lua_gettop(L);
  return HostCall(L, [L, n]() {
    std::string error;
    int id = Driver::From(L)->Spawn(L, n - 1, /*background=*/false, &error);
    if (id < 0) return PushError(L, "braid.spawn: " + error);
    auto* h = static_cast<HandleUd*>(lua_newuserdatauv(L, sizeof(HandleUd), 0));
    h->id = id;
    luaL_setmetatable(L, kHandleMeta);
    return 1;
  });
}

int JoinCheck(lua_State* L, int target) {
  Driver* d = Driver::From(L);
  Driver::Coroutine* c = d->coroutine(target);
  if (!c) return PushError(L, "join: no such coroutine");
  if (c->id == d->current().id) return PushError(L, "join: a coroutine cannot join itself");
  switch (c->status) {
    case Driver::CoStatus::kDone: {
      d->NoteReads(c->reads);  // what it read, its results may carry
      int n = d->PushResults(target, L);
      if (n < 0) return PushError(L, "join: coroutine " + c->path + " returned too many values");
      return n;
    }
    case Driver::CoStatus::kFailed:
      c->error_seen = true;
      return PushError(L, "coroutine " + c->path + " failed: " + c->error);
    default:
      d->BlockOnJoin(target);
      return kYield;
  }
}

int HandleJoinK(lua_State* L, int status, lua_KContext ctx) {
  int target = static_cast<int>(ctx);
  int r = HostCall(L, [L, target]() { return JoinCheck(L, target); });
  if (r != kYield) return r;
  lua_pushlightuserdata(L, LuaState::HostYieldTag());
  return lua_yieldk(L, 1, ctx, HandleJoinK);
}

int LuaHandleJoin(lua_State* L) {
  auto* h = static_cast<HandleUd*>(luaL_checkudata(L, 1, kHandleMeta));
  CheckYieldable(L, "join");
  lua_settop(L, 1);
  return HandleJoinK(L, LUA_OK, static_cast<lua_KContext>(h->id));
}

int LuaHandleStatus(lua_State* L) {
  auto* h = static_cast<HandleUd*>(luaL_checkudata(L, 1, kHandleMeta));
  int id = h->id;
  return HostCall(L, [L, id]() {
    Driver::Coroutine* c = Driver::From(L)->coroutine(id);
    const char* s = "running";
    if (c && c->status == Driver::CoStatus::kDone) s = "done";
    if (c && c->status == Driver::CoStatus::kFailed) s = "failed";
    lua_pushstring(L, s);
    return 1;
  });
}

int LuaHandleToString(lua_State* L) {
  auto* h = static_cast<HandleUd*>(luaL_checkudata(L, 1, kHandleMeta));
  int id = h->id;
  return HostCall(L, [L, id]() {
    Driver::Coroutine* c = Driver::From(L)->coroutine(id);
    std::string s = "braid.handle(" + (c ? c->path : std::string("?")) + ")";
    lua_pushlstring(L, s.data(), s.size());
    return 1;
  });
}

// ---- native nodes ------------------------------------------------------------------

// braid.join(list, sep) -> variable
int LuaJoin(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_optlstring(L, 2, "", nullptr);
  lua_settop(L, 2);
  return HostCall(L, [L]() {
    Driver* d = Driver::From(L);
    size_t seplen = 0;
    const char* sep = lua_isnil(L, 2) ? "" : lua_tolstring(L, 2, &seplen);
    std::vector<rt::Arg> parts;
    lua_Unsigned n = lua_rawlen(L, 1);
    for (lua_Unsigned i = 1; i <= n; ++i) {
      lua_rawgeti(L, 1, static_cast<lua_Integer>(i));
      rt::Arg arg;
      if (!ToArg(L, -1, &arg))
        return PushError(L, "braid.join: item " + std::to_string(i) +
                                " must be a string or a braid variable, got " + TypeName(L, -1) +
                                OutputsHint(L, -1));
      if (!Charge(L, arg.text.size() + seplen)) return kRaise;
      parts.push_back(std::move(arg));
      lua_pop(L, 1);
    }
    auto var = d->run().Join(parts, std::string(sep, seplen));
    if (!var.ok()) return PushError(L, "braid.join: " + var.status().message());
    d->NameVar(*var, "join");
    PushVar(L, *var);
    return 1;
  });
}

// A name for the function at `idx` (braid.map's argument) in node labels. A
// Lua value has no name of its own: this is the caller's local or upvalue
// holding it, else a global, else where it was defined ("fn@app.lua:12").
std::string FunctionName(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  std::string name;
  lua_Debug ar;
  if (lua_getstack(L, 1, &ar)) {
    for (int i = 1; name.empty(); ++i) {
      const char* local = lua_getlocal(L, &ar, i);
      if (!local) break;
      if (local[0] != '(' && lua_rawequal(L, -1, idx)) name = local;  // "(temporary)": not a name
      lua_pop(L, 1);
    }
    if (name.empty() && lua_getinfo(L, "f", &ar)) {
      for (int i = 1; name.empty(); ++i) {
        const char* up = lua_getupvalue(L, -1, i);
        if (!up) break;
        if (*up && lua_rawequal(L, -1, idx)) name = up;
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
    }
  }
  if (name.empty()) {
    lua_pushglobaltable(L);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      if (name.empty() && lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, idx))
        name = lua_tostring(L, -2);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  if (!name.empty()) return name;
  lua_pushvalue(L, idx);
  lua_getinfo(L, ">S", &ar);
  if (ar.linedefined <= 0) return "function";  // a C function
  return std::string("fn@") + ar.short_src + ":" + std::to_string(ar.linedefined);
}

// braid.map(var, fn) -> variable set to fn(value) by a background coroutine.
int LuaMap(lua_State* L) {
  CheckVar(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  return HostCall(L, [L]() {
    Driver* d = Driver::From(L);
    rt::VarId src = TestVar(L, 1)->id;
    // Its node is labelled with the function mapped: "map(clean)".
    const std::string label = "map(" + FunctionName(L, 2) + ")";
    rt::VarId out = d->run().HostVar(label, {src}, label);
    d->NameVar(out, "map(" + d->VarName(src) + ")");
    lua_rawgetp(L, LUA_REGISTRYINDEX, &map_body_key);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    PushVar(L, out);
    std::string error;
    if (d->Spawn(L, 3, /*background=*/true, &error) < 0) return PushError(L, "braid.map: " + error);
    PushVar(L, out);
    return 1;
  });
}

// braid.chunks(text, { tokens = N } | { chars = N }) -> list of strings
int LuaChunks(lua_State* L) {
  luaL_checklstring(L, 1, nullptr);
  lua_Integer max_chars = 512 * static_cast<lua_Integer>(kCharsPerToken);
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "tokens");
    lua_getfield(L, 2, "chars");
    if (!lua_isnil(L, -2) && !lua_isnil(L, -1))
      return luaL_error(L, "braid.chunks: give either tokens or chars, not both");
    int which = lua_isnil(L, -2) ? -1 : -2;
    if (!lua_isnil(L, which)) {
      int isint = 0;
      lua_Integer n = lua_tointegerx(L, which, &isint);
      if (!isint || n < 1 || n > (lua_Integer{1} << 40))
        return luaL_error(L, "braid.chunks: %s must be a positive integer",
                          which == -2 ? "tokens" : "chars");
      max_chars = which == -2 ? n * static_cast<lua_Integer>(kCharsPerToken) : n;
    }
  }
  lua_settop(L, 1);
  return HostCall(L, [L, max_chars]() {
    size_t len = 0;
    const char* s = lua_tolstring(L, 1, &len);
    std::vector<std::string> chunks =
        SplitChunks(std::string_view(s, len), static_cast<size_t>(max_chars));
    lua_createtable(L, static_cast<int>(chunks.size()), 0);
    for (size_t i = 0; i < chunks.size(); ++i) {
      lua_pushlstring(L, chunks[i].data(), chunks[i].size());
      lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
    }
    return 1;
  });
}

// braid.read(path) -> string (see DriverOptions::script_dir for what is allowed)
int LuaRead(lua_State* L) {
  luaL_checkstring(L, 1);
  return HostCall(L, [L]() {
    auto data = Driver::From(L)->ReadFile(lua_tostring(L, 1));
    if (!data.ok()) return PushError(L, data.status().message());
    lua_pushlstring(L, data->data(), data->size());
    return 1;
  });
}

// ---- internals for the bootstrap ------------------------------------------------------

int LuaIsVar(lua_State* L) {
  lua_pushboolean(L, TestVar(L, 1) != nullptr);
  return 1;
}

// await(var): like get, without Want (braid.map bodies: the consumer's Want
// reaches the source through the host variable's dependency).
int LuaAwait(lua_State* L) {
  VarUd* v = CheckVar(L, 1);
  CheckYieldable(L, "braid.map");
  rt::VarId id = v->id;
  int r = HostCall(L, [L, id]() { return CheckReady(L, id, false); });
  if (r != kYield) return r;
  lua_pushlightuserdata(L, LuaState::HostYieldTag());
  return lua_yieldk(L, 1, static_cast<lua_KContext>(id), VarGetK);
}

int LuaSetValue(lua_State* L) {
  VarUd* v = CheckVar(L, 1);
  luaL_checklstring(L, 2, nullptr);
  bool fail = lua_toboolean(L, lua_upvalueindex(1));
  rt::VarId id = v->id;
  return HostCall(L, [L, id, fail]() {
    size_t len = 0;
    const char* s = lua_tolstring(L, 2, &len);
    rt::Run& run = Driver::From(L)->run();
    if (!Charge(L, len)) return kRaise;
    Status st =
        fail ? run.SetFailed(id, std::string(s, len)) : run.SetValue(id, std::string(s, len));
    if (!st.ok()) return PushError(L, st.message());
    return 0;
  });
}

// want(var, criteria_is_latency): Run::Want without waiting (braid.get_all
// and the result resolver announce every variable before waiting for any).
int LuaWant(lua_State* L) {
  VarUd* v = CheckVar(L, 1);
  rt::GetOptions opts;
  opts.criteria = lua_toboolean(L, 2) ? rt::Criteria::kLatency : rt::Criteria::kThroughput;
  if (lua_type(L, 3) == LUA_TNUMBER) opts.deadline_ms = lua_tonumber(L, 3);
  rt::VarId id = v->id;
  return HostCall(L, [L, id, &opts]() {
    Driver* d = Driver::From(L);
    Status s = d->run().Want(id, opts);
    if (!s.ok()) return PushError(L, "get " + d->VarName(id) + ": " + s.message());
    return 0;
  });
}

// A host value read under the next key of its kind: recorded on a first
// run, the recorded one on a resume (Run::Replayable, written in batches).
std::string Replay(Driver* d, const char* what, const std::string& value) {
  return d->run().Replayable(d->NextReplayKey(what), value, rt::Run::Durability::kBatched);
}

// A replayed seed for math.randomseed.
int LuaReplaySeed(lua_State* L) {
  return HostCall(L, [L]() {
    Driver* d = Driver::From(L);
    std::random_device rd;
    uint64_t fresh = (uint64_t{rd()} << 32) ^ rd();
    std::string v = Replay(d, "math.randomseed", std::to_string(fresh));
    lua_pushinteger(L, static_cast<lua_Integer>(std::strtoull(v.c_str(), nullptr, 10)));
    return 1;
  });
}

// os.time([t]): with a table, the stock function; without, a replayed now.
int LuaOsTime(lua_State* L) {
  if (!lua_isnoneornil(L, 1)) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 1);
    lua_call(L, 1, 1);
    return 1;
  }
  return HostCall(L, [L]() {
    Driver* d = Driver::From(L);
    std::string v =
        Replay(d, "os.time", std::to_string(static_cast<long long>(std::time(nullptr))));
    lua_pushinteger(L, static_cast<lua_Integer>(std::strtoll(v.c_str(), nullptr, 10)));
    return 1;
  });
}

// braid.now(): wall-clock seconds since the Unix epoch, with the sub-second
// part; replayed on resume like os.time.
int LuaNow(lua_State* L) {
  return HostCall(L, [L]() {
    Driver* d = Driver::From(L);
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", now);
    std::string v = Replay(d, "braid.now", buf);
    lua_pushnumber(L, std::strtod(v.c_str(), nullptr));
    return 1;
  });
}

// The longest braid.sleep: a tool that takes longer than an hour is better
// given a deadline of its own than a sleep.
constexpr double kMaxSleepSeconds = 3600;

int SleepK(lua_State*, int, lua_KContext) { return 0; }

// braid.sleep(seconds): blocks the calling coroutine for `seconds` of wall
// time, standing for a tool that takes time (an API call, a test run); the
// program's other coroutines run meanwhile. The driver does the waiting
// (Driver::BlockOnSleep), so it is not the script's time (--lua-seconds)
// and an interrupt or a cancel ends it within DriverOptions::poll_ms. The
// time it ends is replayed on resume: a resumed run does not sleep again
// through the sleeps the first attempt finished.
int LuaSleep(lua_State* L) {
  lua_settop(L, 1);  // no argument reads as nil
  int isnum = 0;
  const double seconds = lua_tonumberx(L, 1, &isnum);
  if (!isnum || !(seconds >= 0 && seconds <= kMaxSleepSeconds)) {
    const bool text = lua_type(L, 1) == LUA_TSTRING;
    return luaL_error(L, "braid.sleep: seconds must be a number from 0 to %d, got %s%s%s",
                      static_cast<int>(kMaxSleepSeconds), text ? "'" : "",
                      luaL_tolstring(L, 1, nullptr), text ? "'" : "");
  }
  CheckYieldable(L, "braid.sleep");
  const int r = HostCall(L, [L, seconds]() {
    if (seconds == 0) return 0;
    Driver* d = Driver::From(L);
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", now + seconds);
    const std::string until = Replay(d, "braid.sleep", buf);
    const double left = std::min(seconds, std::strtod(until.c_str(), nullptr) - now);
    if (!(left > 0)) return 0;
    d->BlockOnSleep(left);
    return kYield;
  });
  if (r != kYield) return r;
  lua_pushlightuserdata(L, LuaState::HostYieldTag());
  return lua_yieldk(L, 1, 0, SleepK);
}

int LuaOsClock(lua_State* L) {
  return HostCall(L, [L]() {
    Driver* d = Driver::From(L);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(std::clock()) / CLOCKS_PER_SEC);
    std::string v = Replay(d, "os.clock", buf);
    lua_pushnumber(L, std::strtod(v.c_str(), nullptr));
    return 1;
  });
}

// The Lua half of the module: replayable calendar and random numbers, the
// main and map coroutine bodies.
const char* kBraidLua = R"lua(
local braid, internal = ...
local is_var, await, set, fail, want = internal.is_var, internal.await, internal.set, internal.fail, internal.want
local type, pairs, pcall, tostring, error, select = type, pairs, pcall, tostring, error, select

local raw_date, time = os.date, os.time
os.date = function(fmt, t)
  if t == nil then t = time() end
  return raw_date(fmt, t)
end
local raw_seed, replay_seed = math.randomseed, internal.replay_seed
math.randomseed = function(...)
  if select('#', ...) == 0 then return raw_seed(replay_seed()) end
  return raw_seed(...)
end
raw_seed(replay_seed())

-- Variables anywhere in a value: announced together (one Want each), then
-- replaced by their values, so independent variables run as one batch.
local function walk(v, depth, seen, fn)
  if is_var(v) then return fn(v) end
  if type(v) ~= "table" then return v end
  if depth > 64 then error("the program's result is nested more than 64 levels deep", 0) end
  if seen[v] then error("the program's result contains a cycle", 0) end
  seen[v] = true
  local out = {}
  for k, x in pairs(v) do out[k] = walk(x, depth + 1, seen, fn) end
  seen[v] = nil
  return out
end
local function resolve(v)
  walk(v, 0, {}, function(x) want(x, false) end)
  return walk(v, 0, {}, function(x) return x:get() end)
end

-- braid.get_all(vars, opts): every variable wanted first, then the values.
-- A list gives the list of values; a table with keys, the same keys. An
-- error (a variable that failed) is placed at the caller's line.
local function item_name(k)
  if type(k) == "string" then return "'" .. k .. "'" end
  return tostring(k)
end
braid.get_all = function(vars, opts)
  if type(vars) ~= "table" then error("braid.get_all: expected a table of variables", 2) end
  local latency = opts ~= nil and opts.criteria == "latency"
  local deadline = opts ~= nil and opts.deadline_ms or nil
  for k, v in pairs(vars) do
    if not is_var(v) then error("braid.get_all: item " .. item_name(k) .. " is not a braid variable", 2) end
    want(v, latency, deadline)
  end
  local out = {}
  for k, v in pairs(vars) do
    local ok, value = pcall(v.get, v, opts)
    if not ok then
      if type(value) == "string" then value = value:gsub("^%[braid%]:%d+: ", "") end
      error(value, 2)
    end
    out[k] = value
  end
  return out
end

local function main_body(chunk, ...)
  local r = chunk(...)
  if type(r) == "function" then r = r(...) end
  return resolve(r)
end

local function map_body(src, fn, out)
  local ok, v = pcall(await, src)
  if not ok then return fail(out, tostring(v)) end
  local ok2, r = pcall(fn, v)
  if not ok2 then return fail(out, tostring(r)) end
  if type(r) == "number" then r = tostring(r) end
  if type(r) ~= "string" then
    return fail(out, "braid.map: the function returned a " .. type(r) .. ", not a string")
  end
  set(out, r)
end

-- A REPL input: what it returns, with the variables inside a table shown as
-- their values when ready (else as their printed form), so the table prints
-- as JSON; a variable on its own stays one (it prints with its state).
local function repl_body(input, ...)
  local r = table.pack(input(...))
  for i = 1, r.n do
    if type(r[i]) == "table" then
      local ok, shown = pcall(walk, r[i], 0, {}, function(x)
        if x:state() == "ready" then return x:get() end
        return tostring(x)
      end)
      if ok then r[i] = shown end
    end
  end
  return table.unpack(r, 1, r.n)
end

return main_body, map_body, repl_body
)lua";

const luaL_Reg kBraidFuncs[] = {{"fn", LuaFnNew}, {"spawn", LuaSpawn},   {"join", LuaJoin},
                                {"map", LuaMap},  {"chunks", LuaChunks}, {"read", LuaRead},
                                {"now", LuaNow},  {"sleep", LuaSleep},   {nullptr, nullptr}};

const luaL_Reg kVarMethods[] = {
    {"get", LuaVarGet}, {"state", LuaVarState}, {"scores", LuaVarScores}, {nullptr, nullptr}};
const luaL_Reg kHandleMethods[] = {
    {"join", LuaHandleJoin}, {"status", LuaHandleStatus}, {nullptr, nullptr}};

// A host metatable, locked: getmetatable answers a string and setmetatable
// refuses, so a script cannot add metamethods (say __gc) to the host's types.
void NewMeta(lua_State* L, const char* name) {
  luaL_newmetatable(L, name);
  lua_pushliteral(L, "locked");
  lua_setfield(L, -2, "__metatable");
}

}  // namespace

void PushMainBody(lua_State* L) { lua_rawgetp(L, LUA_REGISTRYINDEX, &main_body_key); }
void PushReplBody(lua_State* L) { lua_rawgetp(L, LUA_REGISTRYINDEX, &repl_body_key); }

int luaopen_braid(lua_State* L) {
  NewMeta(L, kVarMeta);
  lua_createtable(L, 0, 3);
  luaL_setfuncs(L, kVarMethods, 0);
  lua_pushcclosure(L, LuaVarIndex, 1);
  lua_setfield(L, -2, "__index");
  // What a script writes when it means the value: comparisons, arithmetic, #.
  static const char* const kOperators[][2] = {
      {"__eq", "compare"},           {"__lt", "compare"},
      {"__le", "compare"},           {"__len", "take the length of"},
      {"__add", "do arithmetic on"}, {"__sub", "do arithmetic on"},
      {"__mul", "do arithmetic on"}, {"__div", "do arithmetic on"},
      {"__mod", "do arithmetic on"}, {"__pow", "do arithmetic on"},
      {"__unm", "do arithmetic on"}, {"__idiv", "do arithmetic on"}};
  for (const auto& [event, op] : kOperators) {
    lua_pushstring(L, op);
    lua_pushcclosure(L, LuaVarOperator, 1);
    lua_setfield(L, -2, event);
  }
  lua_pushcfunction(L, LuaVarToString);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, LuaVarConcat);
  lua_setfield(L, -2, "__concat");
  lua_pop(L, 1);

  NewMeta(L, kFnMeta);
  lua_pushcfunction(L, LuaFnCall);
  lua_setfield(L, -2, "__call");
  lua_pushcfunction(L, LuaFnToString);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);

  NewMeta(L, kHandleMeta);
  lua_createtable(L, 0, 2);
  luaL_setfuncs(L, kHandleMethods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, LuaHandleToString);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);

  Driver* d = Driver::From(L);
  luaL_newlib(L, kBraidFuncs);
  int braid = lua_gettop(L);
  lua_getglobal(L, "print");
  lua_setfield(L, braid, "log");
  lua_createtable(L, static_cast<int>(d->args().size()), 0);
  for (size_t i = 0; i < d->args().size(); ++i) {
    lua_pushlstring(L, d->args()[i].data(), d->args()[i].size());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setfield(L, braid, "args");
  lua_pushstring(L, d->run().id().c_str());
  lua_setfield(L, braid, "run_id");
  luaopen_braid_json(L);
  lua_setfield(L, braid, "json");

  // Replayable os.time / os.clock (os.date and math.randomseed in Lua below).
  lua_getglobal(L, "os");
  lua_getfield(L, -1, "time");
  lua_pushcclosure(L, LuaOsTime, 1);
  lua_setfield(L, -2, "time");
  lua_pushcfunction(L, LuaOsClock);
  lua_setfield(L, -2, "clock");
  lua_pop(L, 1);

  if (luaL_loadbufferx(L, kBraidLua, std::strlen(kBraidLua), "=[braid]", "t") != LUA_OK)
    return lua_error(L);
  lua_pushvalue(L, braid);
  lua_createtable(L, 0, 6);
  lua_pushcfunction(L, LuaIsVar);
  lua_setfield(L, -2, "is_var");
  lua_pushcfunction(L, LuaAwait);
  lua_setfield(L, -2, "await");
  lua_pushboolean(L, 0);
  lua_pushcclosure(L, LuaSetValue, 1);
  lua_setfield(L, -2, "set");
  lua_pushboolean(L, 1);
  lua_pushcclosure(L, LuaSetValue, 1);
  lua_setfield(L, -2, "fail");
  lua_pushcfunction(L, LuaReplaySeed);
  lua_setfield(L, -2, "replay_seed");
  lua_pushcfunction(L, LuaWant);
  lua_setfield(L, -2, "want");
  lua_call(L, 2, 3);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &repl_body_key);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &map_body_key);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &main_body_key);
  lua_settop(L, braid);
  return 1;
}

}  // namespace braid::lua
