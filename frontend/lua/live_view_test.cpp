// The live view's node names: "fn@FILE:LINE" keeps its line number.
#include <doctest/doctest.h>

#include "lua/live_view.h"

namespace braid::lua {
namespace {

TEST_CASE("DisplayName keeps the line number of fn@FILE:LINE, cutting the path first") {
  CHECK(DisplayName("summarize", 32) == "summarize");
  CHECK(DisplayName("fn@app.lua:12", 32) == "fn@app.lua:12");
  // The directories go first, then the front of the file name.
  CHECK(DisplayName("fn@/home/user/projects/apps/debate/app.lua:123", 32) == "fn@app.lua:123");
  const std::string long_file = "fn@/x/a_really_long_file_name_for_an_app.lua:4567";
  const std::string shown = DisplayName(long_file, 24);
  CHECK(shown.size() == 24);
  CHECK(shown.rfind("fn@~", 0) == 0);
  CHECK(shown.substr(shown.size() - 5) == ":4567");
  // Not a file:line name: cut at the end.
  CHECK(DisplayName("a_very_long_function_name_without_a_place", 10) == "a_very_lo~");
}

}  // namespace
}  // namespace braid::lua
