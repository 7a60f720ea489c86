// Mistakes new users make with calls and variables, each answered with an
// error that names FILE:LINE and says what to write instead, rather than a
// bare Lua error ("attempt to index a nil value").
#include <doctest/doctest.h>

#include <string>

#include "lua/driver.h"
#include "lua/fake_run.h"

namespace braid::lua {
namespace {

using testing::FakeRun;

std::string Run(const std::string& code) {
  FakeRun run;
  auto r = RunProgram(run, "app.lua", code, {}, {});
  if (!r.ok()) return "ERROR: " + r.status().message();
  return r->text;
}

// The first line of the error (a traceback follows).
std::string Error(const std::string& code) {
  const std::string e = Run(code);
  return e.substr(0, e.find('\n'));
}

const std::string kAsk =
    "local ask = braid.fn { name = 'ask', prompt = 'Q: {{q}} {{gen out}} {{select ok "
    "choices=[\"yes\",\"no\"]}}' }\n";

TEST_CASE("a call's outputs: a name it does not have, or a method called on the table") {
  CHECK(Error(kAsk + "return ask{ q = 'x' }.text:get()") ==
        "ERROR: app.lua:2: ask{...} has no output 'text' (outputs: out, ok)");
  CHECK(Error(kAsk + "local r = ask{ q = 'x' }\nreturn r.answer") ==
        "ERROR: app.lua:3: ask{...} has no output 'answer' (outputs: out, ok)");
  CHECK(Error(kAsk + "return ask{ q = 'x' }:get()") ==
        "ERROR: app.lua:2: 'get' is a method of variables, and ask{...} returns a table of its "
        "outputs: call it on one, e.g. ask{...}.out:get() (outputs: out, ok)");
  CHECK(Error(kAsk + "return ask{ q = 'x' }:scores()").find("ask{...}.out:scores()") !=
        std::string::npos);
  // The outputs themselves, pairs, non-string keys and the JSON result are as before.
  CHECK(Run(kAsk + "local r = ask{ q = 'x' }\nlocal n = 0\nfor k, v in pairs(r) do n = n + 1 end\n"
                   "assert(r[1] == nil and n == 2)\nreturn r") == R"({"ok":"yes","out":"out[x]"})");
  // Its metatable is locked like those of braid's other values.
  CHECK(Run(kAsk + "local r = ask{ q = 'x' }\nreturn tostring(getmetatable(r)) .. ' ' .. "
                   "tostring(pcall(setmetatable, r, {}))") == "locked false");
  // Passing the whole table where a value goes.
  CHECK(Error(kAsk + "return ask{ q = ask{ q = 'x' } }") ==
        "ERROR: app.lua:2: ask: input 'q' must be a string or a braid variable, got table (the "
        "table of outputs a call returns: pass one of them, .ok, not the table; outputs: ok, "
        "out)");
  CHECK(Error(kAsk + "return braid.join({ ask{ q = 'x' } })")
            .find("got table (the table of "
                  "outputs a call returns") != std::string::npos);
}

TEST_CASE("a variable used as its text: string methods, fields, comparisons, arithmetic") {
  const std::string v = kAsk + "local v = ask{ q = 'x' }.out\n";
  CHECK(Error(v + "return v:lower()") ==
        "ERROR: app.lua:3: ask.out is a braid variable, not a string: call :get() for its text, "
        "e.g. v:get():lower(...)");
  CHECK(Error(v + "return v.text") ==
        "ERROR: app.lua:3: ask.out is a braid variable: it has no field 'text' (its methods: get, "
        "state, scores)");
  CHECK(Error(v + "return v < 'b'") ==
        "ERROR: app.lua:3: cannot compare ask.out, a braid variable (a value to come): use its "
        "value, v:get() (rawequal(a, b) tells whether two variables are the same one)");
  CHECK(Error(v + "return v == ask{ q = 'y' }.out").find("app.lua:3: cannot compare ask.out") !=
        std::string::npos);
  CHECK(Error(v + "return v + 1").find("app.lua:3: cannot do arithmetic on ask.out") !=
        std::string::npos);
  CHECK(Error(v + "return 2 * v").find("app.lua:3: cannot do arithmetic on ask.out") !=
        std::string::npos);
  CHECK(Error(v + "return #v").find("app.lua:3: cannot take the length of ask.out") !=
        std::string::npos);
  // What still works: methods, identity, tostring, and the value once read.
  CHECK(Run(v + "assert(rawequal(v, v) and v:state() == 'pending')\n"
                "assert(tostring(v):find('braid.var(ask.out', 1, true) == 1)\n"
                "return v:get() == 'out[x]' and 'same' or 'different'") == "same");
  // Lua compares a variable with a string without asking it: always false.
  // (Documented; braid cannot catch it.)
  CHECK(Run(v + "return tostring(v == 'out[x]')") == "false");
}

}  // namespace
}  // namespace braid::lua
