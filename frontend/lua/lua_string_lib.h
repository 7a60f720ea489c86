// The sandbox's string.find, string.match, string.gmatch and string.gsub:
// Lua 5.4's functions on PatternMatcher (lua_patterns.h), whose step budget
// answers to the state's limits, so a pathological pattern stops at the
// instruction, time or interrupt limit like any Lua loop.
#pragma once

struct lua_State;

namespace braid::lua {

// Replaces find, match, gmatch and gsub in the table `string` of L (the one
// the string metatable's __index reaches, so s:find(...) is covered too).
// L must belong to a LuaState (LuaState::From) for the limits. Called once
// while the sandbox is set up; raises only when out of memory.
void OpenStringPatterns(lua_State* L);

}  // namespace braid::lua
