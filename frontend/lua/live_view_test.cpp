// The live view's node names ("fn@FILE:LINE" keeps its line number) and its
// lines cut to the terminal's width.
#include "lua/live_view.h"

#include <doctest/doctest.h>

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

TEST_CASE("FitToWidth cuts each line to the width, colours taking no room") {
  CHECK(FitToWidth("abcdef\nxy\n", 4) == "abcd\x1b[0m\nxy\n");
  CHECK(FitToWidth("abc\n", 3) == "abc\n");
  // Escape sequences are kept whole and take no columns.
  CHECK(FitToWidth("\x1b[1mab\x1b[0m cd\n", 4) == "\x1b[1mab\x1b[0m c\x1b[0m\n");
  CHECK(FitToWidth("\x1b[33mrunning\x1b[0m\n", 7) == "\x1b[33mrunning\x1b[0m\n");
  // A UTF-8 character is one column and never split; a tab goes to the next stop.
  CHECK(FitToWidth("h\xc3\xa9llo\n", 2) == "h\xc3\xa9\x1b[0m\n");
  CHECK(FitToWidth("a\tb\n", 8) == "a\t\x1b[0m\n");
  CHECK(FitToWidth("a\tb\n", 9) == "a\tb\n");
  // The last line needs no newline.
  CHECK(FitToWidth("abcdef", 3) == "abc\x1b[0m");
}

}  // namespace
}  // namespace braid::lua
