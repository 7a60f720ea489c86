// braid.chunks' splitter: sizes respected, boundaries preferred in order
// (paragraph, sentence, word, bytes), nothing lost, UTF-8 kept whole.
#include "lua/chunker.h"

#include <doctest/doctest.h>

#include <random>
#include <string>

namespace braid::lua {
namespace {

// The text's words in order, for checking that nothing is lost or reordered.
std::string Words(const std::string& s) {
  std::string out;
  bool space = true;
  for (char c : s) {
    bool sp = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (sp) {
      if (!space) out += ' ';
      space = true;
    } else {
      out += c;
      space = false;
    }
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string Joined(const std::vector<std::string>& chunks) {
  std::string all;
  for (const auto& c : chunks) all += c + " ";
  return Words(all);
}

TEST_CASE("short text is one chunk, empty text none") {
  CHECK(SplitChunks("  hello world \n", 100) == std::vector<std::string>{"hello world"});
  CHECK(SplitChunks("", 100).empty());
  CHECK(SplitChunks(" \n\n \n", 100).empty());
}

TEST_CASE("paragraphs are packed whole when they fit") {
  std::string text = "First para one.\n\nSecond para two.\n  \nThird para three.";
  auto c = SplitChunks(text, 36);
  REQUIRE(c.size() == 2);
  CHECK(c[0] == "First para one.\n\nSecond para two.");
  CHECK(c[1] == "Third para three.");
}

TEST_CASE("long paragraphs split at sentences, then words, then bytes") {
  std::string text = "One two three. Four five six! Seven eight nine? Ten.";
  auto c = SplitChunks(text, 20);
  for (const auto& s : c) CHECK(s.size() <= 20);
  CHECK(c[0] == "One two three.");
  CHECK(c[1] == "Four five six!");
  CHECK(Joined(c) == Words(text));

  auto w = SplitChunks("alpha beta gamma delta epsilon", 11);
  CHECK(w == std::vector<std::string>{"alpha beta", "gamma delta", "epsilon"});

  auto b = SplitChunks("abcdefghij", 4);
  CHECK(b == std::vector<std::string>{"abcd", "efgh", "ij"});
}

TEST_CASE("never cuts inside a UTF-8 character") {
  std::string text = "\xC3\xA9\xC3\xA9\xC3\xA9";  // "ééé", 6 bytes
  auto c = SplitChunks(text, 3);
  REQUIRE(c.size() == 3);
  for (const auto& s : c) CHECK(s == "\xC3\xA9");
}

TEST_CASE("random texts: sizes hold and no word is lost") {
  std::mt19937 rng(7);
  const char* words[] = {
      "a", "bb", "ccc", "dddd.", "eeeee", "ffffff!", "\n\n", "g?", "hhhhhhhhhhhhhhhhhhhhhhhh"};
  for (int iter = 0; iter < 200; ++iter) {
    std::string text;
    int n = rng() % 200;
    for (int i = 0; i < n; ++i) {
      text += words[rng() % 9];
      text += rng() % 5 ? " " : "\n";
    }
    size_t max = 5 + rng() % 60;
    auto c = SplitChunks(text, max);
    for (const auto& s : c) {
      CHECK(s.size() <= max);
      CHECK(!s.empty());
    }
    // Words may only be split by the byte cutter when longer than max.
    if (max >= 24) CHECK(Joined(c) == Words(text));
  }
}

}  // namespace
}  // namespace braid::lua
