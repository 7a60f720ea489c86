// braid.json: JSON text to Lua values and back, inside the sandbox.
//
//   braid.json.decode(text) -> value   objects and arrays become tables,
//                                      null becomes braid.json.null
//   braid.json.encode(value) -> text   compact, object keys sorted
//   braid.json.null                    the value of JSON null
//
// Both are bounded by the script's memory cap like other host memory
// (LuaState::MayHold): decode checks what the Lua values it builds take
// after each one, encode the text it writes, and either stops with the
// memory limit's error when over it. Nesting is limited to kMaxJsonDepth.
// Errors name the problem and where: "invalid JSON at line 1, column 5:
// ..." for bad text, "value.items[2] is a function, which has no JSON
// form" for a value encode cannot write. Decoding runs nlohmann's SAX
// parser (no document is built); the state's functions follow the
// host-section rule of lua_state.h.
#pragma once

struct lua_State;

namespace braid::lua {

inline constexpr int kMaxJsonDepth = 200;

// Pushes the table { decode, encode, null }. `L` must belong to a LuaState.
int luaopen_braid_json(lua_State* L);

}  // namespace braid::lua
