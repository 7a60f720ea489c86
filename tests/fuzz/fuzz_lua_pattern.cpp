// Differential libFuzzer target for the sandbox's pattern functions
// (frontend/lua/lua_patterns.cpp through lua_string_lib.cpp) against Lua
// 5.4's own string library. The input is SUBJECT '\t' PATTERN '\t'
// REPLACEMENT (missing parts are empty); its size picks an init argument.
// find, match, gmatch and gsub (string, table and function replacements,
// a max count) run in a plain lua_State and in the sandbox; the results and
// error messages must be the same.
//
// Lua's own matcher cannot be interrupted (that is why ours exists), so
// inputs whose worst case is large are skipped: a pattern with k quantifiers
// may backtrack about n^k times at each of n+1 positions on an n-byte subject.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
}

#include "lua/lua_state.h"

namespace {

const char* kBattery = R"lua(
local s, p, r, init = ...
local out = {}
local function rec(...)
  local t = {}
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    t[i] = type(v) .. ':' .. tostring(v)
  end
  out[#out + 1] = table.concat(t, ' ')
end
local function try(f, ...) rec(pcall(f, ...)) end
try(string.find, s, p, init)
try(string.find, s, p, init, true)
try(string.match, s, p, init)
try(function()
  local t = {}
  for a, b in string.gmatch(s, p, init) do
    t[#t + 1] = tostring(a) .. '|' .. tostring(b)
    if #t > 70 then break end
  end
  return table.concat(t, ',')
end)
try(string.gsub, s, p, r)
try(string.gsub, s, p, r, init)
try(string.gsub, s, p, {a = 'A', [''] = false, ['1'] = 1})
try(string.gsub, s, p, function(...) return select('#', ...) .. tostring((...)) end)
return table.concat(out, '\n')
)lua";

void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_lua_pattern: %s\n", what);
  std::abort();
}

std::string Battery(lua_State* L, std::string_view s, std::string_view p, std::string_view r,
                    int init) {
  if (luaL_loadbufferx(L, kBattery, std::strlen(kBattery), "=battery", "t") != LUA_OK)
    Fail("battery does not load");
  lua_pushlstring(L, s.data(), s.size());
  lua_pushlstring(L, p.data(), p.size());
  lua_pushlstring(L, r.data(), r.size());
  lua_pushinteger(L, init);
  int st = lua_pcall(L, 4, 1, 0);
  size_t len = 0;
  const char* t = lua_tolstring(L, -1, &len);
  std::string out = (st == LUA_OK ? "" : "battery failed: ") + std::string(t ? t : "?", len);
  lua_settop(L, 0);
  return out;
}

// An upper bound on the reference's backtracking, as explained above.
bool TooExpensive(std::string_view s, std::string_view p) {
  int quantifiers = 0;
  for (char c : p) quantifiers += (c == '*' || c == '+' || c == '-' || c == '?');
  if (quantifiers > 6) return true;
  double cost = static_cast<double>(s.size()) + 1;
  for (int i = 0; i < quantifiers; ++i) cost *= static_cast<double>(s.size()) + 1;
  return cost > 2e6;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t t1 = input.find('\t');
  std::string_view subject = input.substr(0, t1);
  std::string_view rest = t1 == std::string_view::npos ? std::string_view() : input.substr(t1 + 1);
  size_t t2 = rest.find('\t');
  std::string_view pattern = rest.substr(0, t2);
  std::string_view repl = t2 == std::string_view::npos ? std::string_view() : rest.substr(t2 + 1);
  if (subject.size() > 64 || pattern.size() > 64 || repl.size() > 64) return 0;
  if (TooExpensive(subject, pattern)) return 0;
  int init = static_cast<int>(size % 9) - 4;  // -4 .. 4

  static lua_State* plain = [] {
    lua_State* L = luaL_newstate();
    luaL_openlibs(L);
    return L;
  }();
  static std::unique_ptr<braid::lua::LuaState> sandbox = [] {
    braid::lua::LuaLimits limits;
    limits.cpu_seconds = 0;  // no time limit: results must not depend on speed
    return braid::lua::LuaState::Create(limits);
  }();
  if (!sandbox) Fail("no sandbox");

  std::string want = Battery(plain, subject, pattern, repl, init);
  std::string got = Battery(sandbox->L(), subject, pattern, repl, init);
  if (got != want) {
    std::fprintf(stderr, "subject=%.*s\npattern=%.*s\nrepl=%.*s\ninit=%d\nlua:\n%s\nours:\n%s\n",
                 static_cast<int>(subject.size()), subject.data(), static_cast<int>(pattern.size()),
                 pattern.data(), static_cast<int>(repl.size()), repl.data(), init, want.c_str(),
                 got.c_str());
    Fail("results differ from Lua 5.4's");
  }
  return 0;
}
