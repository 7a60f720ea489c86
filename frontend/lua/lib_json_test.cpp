// braid.json in a sandboxed state: values both ways, errors that say where,
// and the memory cap and depth limit holding for what it builds.
#include <doctest/doctest.h>

#include <string>

extern "C" {
#include <lauxlib.h>
#include <lua.h>
}

#include "lua/driver.h"
#include "lua/fake_run.h"
#include "lua/lib_json.h"
#include "lua/lua_state.h"

namespace braid::lua {
namespace {

// Runs `code` (chunk "t.lua", `json` a global) in a coroutine inside one
// time slice, as the driver does; the first result or the error message.
std::string Run(const std::string& code, size_t memory_bytes = size_t{64} << 20) {
  LuaLimits limits;
  limits.memory_bytes = memory_bytes;
  auto s = LuaState::Create(limits);
  REQUIRE(s);
  lua_State* L = s->L();
  luaopen_braid_json(L);
  lua_setglobal(L, "json");
  if (!s->LoadText(code, "t.lua")) return std::string("SYNTAX: ") + lua_tostring(L, -1);
  lua_State* co = lua_newthread(L);
  lua_insert(L, -2);
  lua_xmove(L, co, 1);
  int nres = 0;
  s->BeginSlice(co);
  const int st = lua_resume(co, L, 0, &nres);
  s->EndSlice();
  const char* t = nres > 0 || st != LUA_OK ? lua_tostring(co, -1) : nullptr;
  return std::string(st == LUA_OK ? "" : "ERROR: ") + (t ? t : "");
}

TEST_CASE("braid.json.decode: objects, arrays, scalars and null") {
  CHECK(Run(R"lua(
local v = json.decode[[{"a": [1, 2.5, "x", true, false, null], "b": {"c": "\u00e9\n"}, "d": -7}]]
assert(math.type(v.a[1]) == "integer" and v.a[2] == 2.5 and v.a[3] == "x")
assert(v.a[4] == true and v.a[5] == false and v.a[6] == json.null and #v.a == 6)
assert(v.b.c == "\u{e9}\n" and v.d == -7)
assert(json.decode("3") == 3 and json.decode('"s"') == "s" and json.decode("null") == json.null)
assert(tostring(json.null) == "braid.json.null" and getmetatable(json.null) == "locked")
-- Integers past Lua's range become floats, as Lua reads such literals.
assert(math.type(json.decode("18446744073709551615")) == "float")
assert(json.decode("9223372036854775807") == math.maxinteger)
return "ok")lua") == "ok");
}

TEST_CASE("braid.json.encode: sorted keys, arrays, escapes, numbers that read back") {
  CHECK(Run(R"lua(return json.encode({ b = 1, a = { 1, "two", json.null, false }, c = {} }))lua") ==
        R"({"a":[1,"two",null,false],"b":1,"c":[]})");
  CHECK(Run(R"lua(return json.encode("q\"\\\n\t\1é"))lua") == R"("q\"\\\n\t\u0001é")");
  CHECK(Run("return json.encode({ 0.1, 1/3, 2^53, -0.0, 1e300, math.mininteger })") ==
        "[0.1,0.3333333333333333,9007199254740992,-0.0,1e+300,-9223372036854775808]");
  // "-0" would read back as the integer 0; "-0.0" reads back as itself.
  CHECK(Run("return json.encode(json.decode(json.encode(-0.0)))") == "-0.0");
  CHECK(Run("return json.encode({ [1] = 'a', [3] = 'c', x = 1 })") == R"({"1":"a","3":"c","x":1})");
  CHECK(Run("return json.encode(nil)") == "null");
  // Round trip: decode(encode(v)) encodes to the same text.
  CHECK(Run(R"lua(
local t = json.encode(json.decode[[{"z":[{"y":null},[],{"1":2}],"a":"\ud83d\ude00","n":1e-7}]])
assert(json.encode(json.decode(t)) == t)
return t)lua") == R"({"a":"😀","n":1e-07,"z":[{"y":null},[],{"1":2}]})");
}

TEST_CASE("braid.json: errors say what and where") {
  CHECK(Run("return json.decode('{\"a\": tru}')") ==
        "ERROR: t.lua:1: braid.json.decode: invalid JSON at line 1, column 10: syntax error while "
        "parsing value - invalid literal; last read: '\"a\": tru}'");
  CHECK(Run("return json.decode('[1,\\n 2,,3]')")
            .find("ERROR: t.lua:1: braid.json.decode: invalid JSON at line 2, column 4: syntax "
                  "error") == 0);
  CHECK(Run("return json.decode('')").find("invalid JSON at line 1, column 1: ") !=
        std::string::npos);
  CHECK(Run("return json.decode('1e999')").find("invalid JSON: number overflow") !=
        std::string::npos);
  CHECK(Run("return json.decode('\"\\xff\"')").find("invalid JSON at line 1, column 2") !=
        std::string::npos);
  CHECK(Run("return json.decode({})")
            .find("bad argument #1 to 'decode' (string expected, got "
                  "table)") != std::string::npos);
  CHECK(Run("return json.encode({ a = { print } })") ==
        "ERROR: t.lua:1: braid.json.encode: value.a[1] is a function, which has no JSON form");
  CHECK(Run("return json.encode({ 0/0 })") ==
        "ERROR: t.lua:1: braid.json.encode: value[1] is NaN, which JSON cannot write");
  CHECK(Run("return json.encode({ x = '\\xff' })") ==
        "ERROR: t.lua:1: braid.json.encode: value.x is not valid UTF-8 text (at byte 0)");
  CHECK(Run("return json.encode({ [true] = 1 })") ==
        "ERROR: t.lua:1: braid.json.encode: value has a boolean key, which has no JSON form");
  CHECK(Run("return json.encode({ [1] = 'a', ['1'] = 'b', x = 1 })") ==
        "ERROR: t.lua:1: braid.json.encode: value has the key \"1\" both as a string and as a "
        "number");
  CHECK(Run("local t = {}\nt.self = t\nreturn json.encode(t)")
            .find("ERROR: t.lua:3: braid.json.encode: value.self.self.self") == 0);
  CHECK(Run("local t = {}\nt.self = t\nreturn json.encode(t)")
            .find("is nested more than 200 levels deep (a table that contains itself?)") !=
        std::string::npos);
  // pcall catches them; the state goes on.
  CHECK(Run("local ok, e = pcall(json.decode, '[')\nreturn tostring(ok) .. ' ' .. "
            "json.encode({ 1 })") == "false [1]");
}

TEST_CASE("braid.json: nesting is bounded") {
  CHECK(Run("return #json.decode(string.rep('[', 200) .. string.rep(']', 200))") == "1");
  CHECK(Run("return json.decode(string.rep('[', 201) .. string.rep(']', 201))") ==
        "ERROR: t.lua:1: braid.json.decode: nested more than 200 levels deep");
  CHECK(Run("return json.decode(string.rep('[', 100000))") ==
        "ERROR: t.lua:1: braid.json.decode: nested more than 200 levels deep");
}

TEST_CASE("braid.json: what it builds counts against the memory cap") {
  const size_t cap = size_t{8} << 20;
  // 1.5 MB of text is 500,000 empty tables: far more than 8 MB of Lua values.
  CHECK(Run("local s = '[' .. string.rep('[],', 500000) .. '[]]'\nreturn #json.decode(s)", cap) ==
        "ERROR: t.lua:2: braid.json.decode: memory limit: the script needed more than 8 MB "
        "(--lua-memory-mb)");
  // 1 MB held once, written 20 times: 20 MB of text.
  CHECK(Run("local s = string.rep('x', 1 << 20)\nlocal t = {}\nfor i = 1, 20 do t[i] = s end\n"
            "return json.encode(t)",
            cap) ==
        "ERROR: t.lua:4: braid.json.encode: memory limit: the script needed more than 8 MB "
        "(--lua-memory-mb)");
  // Within the cap both work.
  CHECK(Run("local s = '[' .. string.rep('[],', 5000) .. '[]]'\nreturn #json.decode(s)", cap) ==
        "5001");
}

TEST_CASE("a program has braid.json; a variable must be read before it is encoded") {
  testing::FakeRun run;
  auto r = RunProgram(run, "app.lua", R"lua(
local ask = braid.fn { name = 'ask', prompt = '{{q}} {{gen out}}' }
local q = braid.json.decode('{"q": "x", "n": [1, 2]}')
local v = ask{ q = q.q }.out
local ok, e = pcall(braid.json.encode, { v })
assert(not ok and e:find("braid.json.encode: value%[1%] is a braid variable: encode its value, "
                         .. "v:get%(%)"), e)
return braid.json.encode({ answer = v:get(), n = q.n })
)lua",
                      {}, {});
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  CHECK(r->text == R"({"answer":"out[x]","n":[1,2]})");
}

}  // namespace
}  // namespace braid::lua
