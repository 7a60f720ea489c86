#include "exec/regex_dfa.h"

#include <doctest/doctest.h>

#include <cmath>

#include "exec/token_mask.h"
#include "testing/fakes.h"

using namespace braid;
using namespace braid::rt;

namespace {
bool M(const std::string& pattern, const std::string& text) {
  auto d = RegexDfa::Compile(pattern);
  REQUIRE_MESSAGE(d.ok(), d.status().message());
  return d->FullMatch(text);
}
}  // namespace

TEST_CASE("regex: the usual syntax, anchored") {
  CHECK(M("abc", "abc"));
  CHECK(!M("abc", "abcd"));
  CHECK(!M("abc", "ab"));
  CHECK(M("a.c", "abc"));
  CHECK(M("a.c",
          "a\xc3\xa9"
          "c"));  // '.' is one UTF-8 character
  CHECK(!M("a.c", "a\nc"));
  CHECK(M("[a-c]+", "abcabc"));
  CHECK(!M("[a-c]+", ""));
  CHECK(M("[^0-9]*", "abc"));
  CHECK(!M("[^0-9]*", "a1"));
  CHECK(M("ab*c", "ac"));
  CHECK(M("ab*c", "abbbc"));
  CHECK(M("ab+c", "abc"));
  CHECK(!M("ab+c", "ac"));
  CHECK(M("colou?r", "color"));
  CHECK(M("colou?r", "colour"));
  CHECK(M("[0-9]{4}", "2024"));
  CHECK(!M("[0-9]{4}", "202"));
  CHECK(!M("[0-9]{4}", "20245"));
  CHECK(M("a{2,3}", "aa"));
  CHECK(M("a{2,3}", "aaa"));
  CHECK(!M("a{2,3}", "aaaa"));
  CHECK(M("a{2,}", "aaaaa"));
  CHECK(M("(yes|no)", "no"));
  CHECK(!M("(yes|no)", "maybe"));
  CHECK(M("(ab)+", "ababab"));
  CHECK(M("(?:ab|cd)*e", "abcde"));
  CHECK(M("\\d+\\.\\d+", "3.14"));
  CHECK(!M("\\d+\\.\\d+", "3x14"));
  CHECK(M("\\w+\\s\\w+", "hello world"));
  CHECK(M("[\\w-]+", "a-b_c"));
  CHECK(M("^abc$", "abc"));
  CHECK(M("a\\*b", "a*b"));
  CHECK(M("x{", "x{"));  // not a quantifier: a literal brace
  CHECK(M("\\D\\S\\W", "a- "));
}

TEST_CASE("regex: errors and pruning") {
  CHECK(!RegexDfa::Compile("(ab").ok());
  CHECK(!RegexDfa::Compile("ab)").ok());
  CHECK(!RegexDfa::Compile("[ab").ok());
  CHECK(!RegexDfa::Compile("*a").ok());
  CHECK(!RegexDfa::Compile("a{3,2}").ok());
  CHECK(!RegexDfa::Compile("a\\").ok());
  CHECK(RegexDfa::Compile("(ab").status().message() == "regex: missing ')' at 3");
  auto d = RegexDfa::Compile("[0-9]{2}");
  REQUIRE(d.ok());
  // A walk that stays alive can always be completed.
  int s = d->Walk(d->start(), "4");
  CHECK(s != RegexDfa::kDead);
  CHECK(!d->Accepting(s));
  s = d->Walk(s, "2");
  CHECK(d->Accepting(s));
  CHECK(!d->CanContinue(s));
  CHECK(d->Walk(s, "1") == RegexDfa::kDead);
  CHECK(d->Walk(d->start(), "x") == RegexDfa::kDead);
}

TEST_CASE("regex mask: tokens that cannot continue are -inf; EOG only when accepting") {
  testing::FakeModel model;  // byte tokens 0..255, EOG 256
  auto dfa = RegexDfa::Compile("(yes|no)");
  REQUIRE(dfa.ok());
  RegexMask mask(std::make_shared<const RegexDfa>(*dfa), TokenTable::ForModel(model));
  std::vector<float> logits(257, 1.0f);
  mask({}, logits);
  int allowed = 0;
  for (int i = 0; i < 257; ++i) allowed += std::isfinite(logits[static_cast<size_t>(i)]);
  CHECK(allowed == 2);
  CHECK(std::isfinite(logits['y']));
  CHECK(std::isfinite(logits['n']));
  CHECK(!std::isfinite(logits[256]));
  std::vector<int32_t> gen = {'n', 'o'};
  std::fill(logits.begin(), logits.end(), 1.0f);
  mask(gen, logits);
  CHECK(std::isfinite(logits[256]));  // accepting: only EOG remains
  allowed = 0;
  for (float l : logits) allowed += std::isfinite(l);
  CHECK(allowed == 1);
  // A different history (preemption replay) restarts the walk.
  gen = {'y'};
  std::fill(logits.begin(), logits.end(), 1.0f);
  mask(gen, logits);
  CHECK(std::isfinite(logits['e']));
  CHECK(!std::isfinite(logits['o']));
}
