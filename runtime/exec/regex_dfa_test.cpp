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

namespace {
std::string CompileError(const std::string& pattern) {
  auto d = RegexDfa::Compile(pattern);
  return d.ok() ? "(compiled)" : d.status().message();
}
std::string Nested(size_t n) { return std::string(n, '(') + "a" + std::string(n, ')'); }
}  // namespace

TEST_CASE("regex: nesting is bounded, deep groups fail cleanly instead of overflowing the stack") {
  // 250 levels compile; one more is refused where the 251st group opens.
  CHECK(M(Nested(250), "a"));
  CHECK(CompileError(Nested(251)) == "regex: groups and repeats nested deeper than 250 at 250");
  CHECK(CompileError(Nested(9000)) == "regex: groups and repeats nested deeper than 250 at 250");
  CHECK(CompileError(std::string(9000, '(')) ==
        "regex: groups and repeats nested deeper than 250 at 250");
  CHECK(CompileError("(?:" + Nested(9000) + ")") ==
        "regex: groups and repeats nested deeper than 250 at 252");
  CHECK(CompileError(Nested(100000)) == "regex: pattern longer than 65536 bytes at 65536");
  // Groups and repeats count together: 200 groups around 60 stacked stars.
  CHECK(CompileError(std::string(200, '(') + "a" + std::string(60, '*') + std::string(200, ')'))
            .find("regex: groups and repeats nested deeper than 250 at ") == 0);
}

TEST_CASE("regex: stacked repeats are bounded, a million '*' fail cleanly") {
  CHECK(M("a**", "aaa"));
  CHECK(M("a" + std::string(250, '*'), "aa"));
  CHECK(CompileError("a" + std::string(251, '*')) ==
        "regex: groups and repeats nested deeper than 250 at 251");
  CHECK(CompileError("a" + std::string(60000, '*')) ==
        "regex: groups and repeats nested deeper than 250 at 251");
  CHECK(CompileError("a" + std::string(1000000, '*')) ==
        "regex: pattern longer than 65536 bytes at 65536");
  CHECK(CompileError("a{2}" + std::string(300, '?')).find("nested deeper than 250") !=
        std::string::npos);
}

TEST_CASE("regex: long alternations compile or name the NFA bound") {
  std::string words;
  for (int i = 0; i < 2000; ++i) words += (i ? "|w" : "w") + std::to_string(i);
  auto d = RegexDfa::Compile("(" + words + ")");
  REQUIRE_MESSAGE(d.ok(), d.status().message());
  CHECK(d->FullMatch("w1999"));
  CHECK(d->FullMatch("w0"));
  CHECK(!d->FullMatch("w2000"));
  std::string many;
  for (int i = 0; i < 30000; ++i) many += "a|";
  many += "a";
  CHECK(CompileError(many).find("regex: pattern too large (more than 50000 NFA states) at ") == 0);
  // Alternations nested in one another are groups like any other.
  std::string nested;
  for (int i = 0; i < 9000; ++i) nested += "(a|";
  nested += "b" + std::string(9000, ')');
  CHECK(CompileError(nested) == "regex: groups and repeats nested deeper than 250 at 750");
}

TEST_CASE("regex: DFA blow-up is refused, not built") {
  // (a|b)*a(a|b){n} needs 2^(n+1) DFA states: 2^13 fit, 2^21 do not.
  auto d = RegexDfa::Compile("(a|b)*a(a|b){12}");
  REQUIRE_MESSAGE(d.ok(), d.status().message());
  CHECK(d->FullMatch("bbba" + std::string(12, 'b')));
  CHECK(!d->FullMatch("bbbb" + std::string(12, 'b')));
  CHECK(CompileError("(a|b)*a(a|b){20}") ==
        "regex: pattern too large for a DFA (more than 10000 states)");
  CHECK(CompileError("[ab]*a[ab]{1000}") ==
        "regex: pattern too large for a DFA (more than 10000 states)");
  // Few DFA states, each a large set of NFA states: bounded by their total.
  CHECK(CompileError("(a{0,1000}){20}b") ==
        "regex: pattern too large for a DFA (more than 2000000 NFA states across its states)");
  // Many byte classes over large sets: bounded by the construction's steps.
  CHECK(CompileError("(\\w*\\d*\\s*.?){100}[xyz]{99}") ==
        "regex: pattern too large for a DFA (more than 20000000 construction steps)");
}

TEST_CASE("regex: a shared step budget bounds patterns compiled together") {
  const std::string pattern = "(a|b)*a(a|b){8}";
  size_t left = RegexDfa::kMaxSteps;
  REQUIRE(RegexDfa::Compile(pattern, &left).ok());
  const size_t spent = RegexDfa::kMaxSteps - left;
  CHECK(spent > 0);
  // Room for three and a half: three compile, the fourth runs out.
  left = 3 * spent + spent / 2;
  for (int i = 0; i < 3; ++i) CHECK(RegexDfa::Compile(pattern, &left).ok());
  CHECK(left == spent / 2);
  auto fourth = RegexDfa::Compile(pattern, &left);
  REQUIRE(!fourth.ok());
  CHECK(fourth.status().code() == StatusCode::kResourceExhausted);
  CHECK(fourth.status().message() == "regex: pattern needs more construction steps than the " +
                                         std::to_string(spent / 2) +
                                         " left of a budget shared with other patterns");
  CHECK(left == 0);
}
