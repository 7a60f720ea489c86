#include "lua/lua_string_lib.h"

#include <cstdint>
#include <string_view>

#include "lua/lua_patterns.h"
#include "lua/lua_state.h"

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

// Every lua_CFunction here follows the host-section rule (lua_state.h): its
// frame holds only trivially destructible objects (PatternMatcher,
// luaL_Buffer, plain values), so Lua may raise or yield through it. The
// matcher never raises itself; it returns kError or kStopped and the
// function raises with Lua's message or stops for the limit.
namespace braid::lua {
namespace {

constexpr size_t kNone = SIZE_MAX;

bool OnSteps(void* ctx, uint64_t steps) {
  auto* L = static_cast<lua_State*>(ctx);
  return LuaState::From(L)->ChargeSteps(L, steps);
}

PatternStepCallback StepsOf(lua_State* L) { return {&OnSteps, L}; }

// Lua 5.4's reading of an init argument: negative counts from the end, 0
// and anything before the start mean 1. The result is 1-based.
size_t StartIndex(lua_Integer pos, size_t len) {
  if (pos > 0) return static_cast<size_t>(pos);
  if (pos == 0) return 1;
  if (pos < -static_cast<lua_Integer>(len)) return 1;
  return len + static_cast<size_t>(pos) + 1;
}

// Raises the matcher's error (never returns).
int RaiseMatchError(lua_State* L, const PatternMatcher& m) {
  return luaL_error(L, "%s", m.error());
}

int PushCapture(lua_State* L, PatternMatcher& m, const char* subject, int i, size_t start) {
  PatternCapture c;
  if (!m.GetCapture(i, start, &c)) return RaiseMatchError(L, m);
  if (c.position) {
    lua_pushinteger(L, static_cast<lua_Integer>(c.start) + 1);
  } else {
    lua_pushlstring(L, subject + c.start, c.len);
  }
  return 1;
}

// Pushes the captures of a match from `start`; with `whole`, the whole match
// stands in for a pattern without captures (match, gmatch, gsub's function).
int PushCaptures(lua_State* L, PatternMatcher& m, const char* subject, size_t start, bool whole) {
  int n = (m.capture_count() == 0 && whole) ? 1 : m.capture_count();
  luaL_checkstack(L, n, "too many captures");
  for (int i = 0; i < n; ++i) PushCapture(L, m, subject, i, start);
  return n;
}

int FindOrMatch(lua_State* L, bool find) {
  size_t ls = 0, lp = 0;
  const char* s = luaL_checklstring(L, 1, &ls);
  const char* p = luaL_checklstring(L, 2, &lp);
  size_t init = StartIndex(luaL_optinteger(L, 3, 1), ls) - 1;
  if (init > ls) {  // starts after the end: nothing can match
    luaL_pushfail(L);
    return 1;
  }
  std::string_view subject(s, ls), pattern(p, lp);
  if (find && (lua_toboolean(L, 4) || PatternMatcher::NoSpecials(pattern))) {
    size_t at = PatternMatcher::FindPlain(subject, pattern, init);
    if (at == std::string_view::npos) {
      luaL_pushfail(L);
      return 1;
    }
    lua_pushinteger(L, static_cast<lua_Integer>(at) + 1);
    lua_pushinteger(L, static_cast<lua_Integer>(at + lp));
    return 2;
  }
  PatternMatcher m(subject, pattern, StepsOf(L));
  bool anchor = lp > 0 && p[0] == '^';
  size_t s1 = init;
  do {
    switch (m.MatchAt(s1, anchor ? 1 : 0)) {
      case MatchStatus::kMatch:
        if (find) {
          lua_pushinteger(L, static_cast<lua_Integer>(s1) + 1);
          lua_pushinteger(L, static_cast<lua_Integer>(m.end()));
          return PushCaptures(L, m, s, s1, false) + 2;
        }
        return PushCaptures(L, m, s, s1, true);
      case MatchStatus::kError:
        return RaiseMatchError(L, m);
      case MatchStatus::kStopped:
        return LuaState::From(L)->StopForLimit(L);
      case MatchStatus::kNoMatch:
        break;
    }
  } while (s1++ < ls && !anchor);
  luaL_pushfail(L);
  return 1;
}

int StrFind(lua_State* L) { return FindOrMatch(L, true); }
int StrMatch(lua_State* L) { return FindOrMatch(L, false); }

// gmatch's iterator state, a userdata upvalue beside the subject and pattern.
struct GmatchState {
  size_t src;        // where the next search starts
  size_t lastmatch;  // end of the last match (an empty match may not end there again)
};

int GmatchNext(lua_State* L) {
  size_t ls = 0, lp = 0;
  const char* s = lua_tolstring(L, lua_upvalueindex(1), &ls);
  const char* p = lua_tolstring(L, lua_upvalueindex(2), &lp);
  auto* g = static_cast<GmatchState*>(lua_touserdata(L, lua_upvalueindex(3)));
  PatternMatcher m(std::string_view(s, ls), std::string_view(p, lp), StepsOf(L));
  // No anchor here: a leading '^' is matched as a plain character, as in Lua.
  for (size_t src = g->src; src <= ls; ++src) {
    switch (m.MatchAt(src, 0)) {
      case MatchStatus::kMatch:
        if (m.end() == g->lastmatch) break;
        g->src = g->lastmatch = m.end();
        return PushCaptures(L, m, s, src, true);
      case MatchStatus::kError:
        return RaiseMatchError(L, m);
      case MatchStatus::kStopped:
        return LuaState::From(L)->StopForLimit(L);
      case MatchStatus::kNoMatch:
        break;
    }
  }
  return 0;
}

int StrGmatch(lua_State* L) {
  size_t ls = 0;
  luaL_checklstring(L, 1, &ls);
  luaL_checkstring(L, 2);
  size_t init = StartIndex(luaL_optinteger(L, 3, 1), ls) - 1;
  if (init > ls) init = ls + 1;  // after the end: no match
  lua_settop(L, 2);
  auto* g = static_cast<GmatchState*>(lua_newuserdatauv(L, sizeof(GmatchState), 0));
  g->src = init;
  g->lastmatch = kNone;
  lua_pushcclosure(L, GmatchNext, 3);
  return 1;
}

// gsub's string replacement: "%0" the whole match, "%1".."%9" captures
// (position captures as numbers), "%%" a '%'.
void AddReplacementString(lua_State* L, luaL_Buffer* b, PatternMatcher& m, const char* src,
                          size_t start) {
  size_t l = 0;
  const char* news = lua_tolstring(L, 3, &l);
  size_t i = 0;
  while (i < l) {
    char c = news[i++];
    if (c != '%') {
      luaL_addchar(b, c);
      continue;
    }
    char d = i < l ? news[i] : '\0';
    ++i;
    if (d == '%') {
      luaL_addchar(b, '%');
    } else if (d == '0') {
      luaL_addlstring(b, src + start, m.end() - start);
    } else if (d >= '1' && d <= '9') {
      PatternCapture cap;
      if (!m.GetCapture(d - '1', start, &cap)) {
        RaiseMatchError(L, m);
        return;
      }
      if (cap.position) {
        lua_pushinteger(L, static_cast<lua_Integer>(cap.start) + 1);
        luaL_addvalue(b);
      } else {
        luaL_addlstring(b, src + cap.start, cap.len);
      }
    } else {
      luaL_error(L, "invalid use of '%c' in replacement string", '%');
      return;
    }
  }
}

void AddReplacement(lua_State* L, luaL_Buffer* b, PatternMatcher& m, const char* src, size_t start,
                    int tr) {
  if (tr == LUA_TFUNCTION) {
    lua_pushvalue(L, 3);
    int n = PushCaptures(L, m, src, start, true);
    lua_call(L, n, 1);
  } else if (tr == LUA_TTABLE) {
    PushCapture(L, m, src, 0, start);
    lua_gettable(L, 3);
  } else {
    AddReplacementString(L, b, m, src, start);
    return;
  }
  if (!lua_toboolean(L, -1)) {  // nil or false: keep the original text
    lua_pop(L, 1);
    luaL_addlstring(b, src + start, m.end() - start);
  } else if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  } else {
    luaL_addvalue(b);
  }
}

int StrGsub(lua_State* L) {
  size_t srcl = 0, lp = 0;
  const char* src = luaL_checklstring(L, 1, &srcl);
  const char* p = luaL_checklstring(L, 2, &lp);
  int tr = lua_type(L, 3);
  lua_Integer max_s = luaL_optinteger(L, 4, static_cast<lua_Integer>(srcl) + 1);
  luaL_argexpected(
      L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION || tr == LUA_TTABLE, 3,
      "string/function/table");
  bool anchor = lp > 0 && p[0] == '^';
  PatternMatcher m(std::string_view(src, srcl), std::string_view(p, lp), StepsOf(L));
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t s = 0;
  size_t lastmatch = kNone;
  lua_Integer n = 0;
  while (n < max_s) {
    MatchStatus st = m.MatchAt(s, anchor ? 1 : 0);
    if (st == MatchStatus::kError) return RaiseMatchError(L, m);
    if (st == MatchStatus::kStopped) return LuaState::From(L)->StopForLimit(L);
    if (st == MatchStatus::kMatch && m.end() != lastmatch) {
      ++n;
      AddReplacement(L, &b, m, src, s, tr);
      s = lastmatch = m.end();
    } else if (s < srcl) {
      luaL_addchar(&b, src[s++]);
    } else {
      break;
    }
    if (anchor) break;
  }
  luaL_addlstring(&b, src + s, srcl - s);
  luaL_pushresult(&b);
  lua_pushinteger(L, n);
  return 2;
}

}  // namespace

void OpenStringPatterns(lua_State* L) {
  static const luaL_Reg kFunctions[] = {{"find", StrFind},
                                        {"match", StrMatch},
                                        {"gmatch", StrGmatch},
                                        {"gsub", StrGsub},
                                        {nullptr, nullptr}};
  lua_getglobal(L, "string");
  luaL_setfuncs(L, kFunctions, 0);
  lua_pop(L, 1);
}

}  // namespace braid::lua
