// libFuzzer target for braid.json (frontend/lua/lib_json.cpp) in a sandboxed
// state with a memory cap. The input is JSON text (or not):
//  - decode succeeds exactly when nlohmann::json::accept does, except for
//    the depth limit and the memory cap, which must fail with their errors;
//  - whatever decode returns, encode writes, and decoding that text and
//    encoding it again gives the same text (encode's output is canonical).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

#include "lua/lib_json.h"
#include "lua/lua_state.h"

namespace {

// Returns "ok", "refused: MESSAGE" for a decode error, or raises for a
// broken property.
const char* kCheck = R"lua(
local json, s = ...
local ok, v = pcall(json.decode, s)
if not ok then return "refused: " .. v end
local ok2, t = pcall(json.encode, v)
if not ok2 then
  if t:find("memory limit", 1, true) then return "ok" end
  error("cannot encode what decode returned: " .. t)
end
local ok3, v2 = pcall(json.decode, t)
if not ok3 then
  if v2:find("memory limit", 1, true) then return "ok" end
  error("cannot decode what encode wrote: " .. v2 .. "\n" .. t)
end
local ok4, t2 = pcall(json.encode, v2)
if not ok4 then
  if t2:find("memory limit", 1, true) then return "ok" end
  error("cannot encode twice: " .. t2)
end
if t ~= t2 then error("encode is not canonical:\n" .. t .. "\n" .. t2) end
return "ok"
)lua";

void Fail(const std::string& what, std::string_view input) {
  std::fprintf(stderr, "fuzz_lua_json: %s\ninput: %.*s\n", what.c_str(),
               static_cast<int>(std::min<size_t>(input.size(), 2000)), input.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  braid::lua::LuaLimits limits;
  limits.memory_bytes = size_t{16} << 20;
  limits.cpu_seconds = 0;  // results must not depend on speed
  std::unique_ptr<braid::lua::LuaState> s = braid::lua::LuaState::Create(limits);
  if (!s) Fail("no state", input);
  lua_State* L = s->L();
  if (!s->LoadText(kCheck, "check")) Fail("the check does not load", input);
  braid::lua::luaopen_braid_json(L);
  lua_pushlstring(L, input.data(), input.size());
  // Run as the driver does: in a coroutine, inside a time slice (the
  // allocator enforces the cap only there).
  lua_State* co = lua_newthread(L);
  lua_insert(L, -4);
  lua_xmove(L, co, 3);
  int nres = 0;
  s->BeginSlice(co);
  const int st = lua_resume(co, L, 2, &nres);
  s->EndSlice();
  const char* r = lua_tostring(co, -1);
  const std::string result = r ? r : "?";
  if (st != LUA_OK) Fail(result, input);
  const bool accepted = nlohmann::json::accept(input.begin(), input.end());
  const bool refused = result.rfind("refused: ", 0) == 0;
  const bool limit = result.find("nested more than") != std::string::npos ||
                     result.find("memory limit") != std::string::npos;
  if (accepted && refused && !limit) Fail("valid JSON refused: " + result, input);
  if (!accepted && !refused) Fail("invalid JSON decoded", input);
  return 0;
}
