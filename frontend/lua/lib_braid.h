// The `braid` Lua module: braid.fn, braid.spawn, braid.join, braid.map,
// braid.chunks, braid.json (lib_json.h), braid.log, braid.args,
// braid.run_id, variables (:get, :state) and spawn handles (:join), plus
// replayable os.time / os.clock / os.date / math.randomseed. See
// docs/lua-dsl.md.
//
// The module talks to its Driver (driver.h), found through the state's
// extra space; it must be opened after the Driver installed itself there.
#pragma once

struct lua_State;

namespace braid::lua {

// Opens the module into L as the global `braid` and replaces the
// non-deterministic os/math functions. Returns 1 (the module table).
int luaopen_braid(lua_State* L);

// Pushes the bootstrap function that runs a program's main chunk:
// main_body(chunk, ...) calls chunk(...), calls the function it returns (if
// any) with the same arguments, and returns its first result with every
// variable in it replaced by its value.
void PushMainBody(lua_State* L);

// Pushes the function that runs a REPL input: repl_body(chunk) returns what
// chunk() returns, tables with the ready variables in them replaced by their
// values and the others by their printed form (variables alone stay).
void PushReplBody(lua_State* L);

}  // namespace braid::lua
