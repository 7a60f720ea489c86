// VerifyGuesses and OutputStops: which guesses a pass keeps and where the
// output ends among them.
#include "runner/spec_verify.h"

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

namespace braid {
namespace {

// A request's output as Generate and the serving engine build it: tokens,
// text, and why it ended.
struct Output {
  explicit Output(const SamplingParams& p) : stops(p) {}
  OutputStops stops;
  std::map<int32_t, std::string> pieces;  // each token's text
  int32_t eog = 2;                        // the model's end of generation
  std::vector<int32_t> tokens;
  std::string text;
  std::string reason;

  bool Take(int32_t id) {
    if (stops.EndsBefore(id, id == eog)) {
      reason = "stop";
      return true;
    }
    tokens.push_back(id);
    std::string t;
    const std::string piece = pieces.count(id) ? pieces[id] : "<" + std::to_string(id) + ">";
    const OutputStops::End end = stops.Joined(static_cast<int>(tokens.size()), &piece, &t);
    text += t;
    if (end == OutputStops::End::kStopString) reason = "stop";
    if (end == OutputStops::End::kLength) reason = "length";
    return end != OutputStops::End::kNone;
  }
};

// Runs one pass whose rows draw `draws` in turn.
Verdict Pass(const std::vector<int32_t>& guesses, const std::vector<int32_t>& draws, Output& out,
             int* rows_drawn = nullptr) {
  int drawn = 0;
  auto draw = [&](int j) {
    REQUIRE(j == drawn);
    REQUIRE(static_cast<size_t>(j) < draws.size());
    ++drawn;
    return draws[static_cast<size_t>(j)];
  };
  const Verdict v = VerifyGuesses(guesses, draw, [&](int32_t id) { return out.Take(id); });
  if (rows_drawn) *rows_drawn = drawn;
  return v;
}

SamplingParams Params(int max_tokens) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  return p;
}

TEST_CASE("guesses are kept while the draws agree; the first other draw ends the pass") {
  Output out(Params(100));
  int rows = 0;
  const Verdict v = Pass({5, 6, 7}, {5, 6, 9, 7}, out, &rows);
  CHECK(v.accepted == 2);
  CHECK(v.last == 9);
  CHECK_FALSE(v.ended);
  CHECK(v.bad_row == -1);
  CHECK(rows == 3);  // the row after the correction is never drawn
  CHECK(out.tokens == std::vector<int32_t>{5, 6, 9});
}

TEST_CASE("every guess kept: the pass yields one more token") {
  Output out(Params(100));
  const Verdict v = Pass({5, 6, 7}, {5, 6, 7, 8}, out);
  CHECK(v.accepted == 3);
  CHECK(v.last == 8);
  CHECK(out.tokens == std::vector<int32_t>{5, 6, 7, 8});
}

TEST_CASE("a first guess that misses keeps none; no guesses is a plain step") {
  Output out(Params(100));
  Verdict v = Pass({5, 6}, {4}, out);
  CHECK(v.accepted == 0);
  CHECK(v.last == 4);
  v = Pass({}, {3}, out);
  CHECK(v.accepted == 0);
  CHECK(v.last == 3);
  CHECK(out.tokens == std::vector<int32_t>{4, 3});
}

TEST_CASE("a stop token among the kept guesses ends the output before it") {
  SamplingParams p = Params(100);
  p.stop_tokens = {6};
  Output out(p);
  const Verdict v = Pass({5, 6, 7}, {5, 6, 7, 8}, out);
  CHECK(v.ended);
  CHECK(v.accepted == 1);  // 5 was kept; the output ends at 6, which it does not include
  CHECK(v.last == 6);
  CHECK(out.reason == "stop");
  CHECK(out.tokens == std::vector<int32_t>{5});
}

TEST_CASE("the model's end of generation ends the output like a stop token") {
  Output out(Params(100));
  const Verdict v = Pass({5, 2, 7}, {5, 2}, out);
  CHECK(v.ended);
  CHECK(v.accepted == 1);
  CHECK(out.tokens == std::vector<int32_t>{5});
}

TEST_CASE("a stop string completed within the kept guesses cuts the text before it") {
  SamplingParams p = Params(100);
  p.stop = {"cd"};
  Output out(p);
  out.pieces = {{5, "ab"}, {6, "c"}, {7, "d"}, {8, "e"}};
  const Verdict v = Pass({5, 6, 7, 8}, {5, 6, 7, 8, 9}, out);
  CHECK(v.ended);
  CHECK(v.accepted == 2);
  CHECK(v.last == 7);
  CHECK(out.reason == "stop");
  CHECK(out.tokens == std::vector<int32_t>{5, 6, 7});  // the stop string's tokens stay
  CHECK(out.text == "ab");
  CHECK(out.stops.stopped_by_string());
  std::string held;
  CHECK(out.stops.Flush("more", &held).empty());
  CHECK(held.empty());
}

TEST_CASE("stop strings count only after min_tokens") {
  SamplingParams p = Params(100);
  p.stop = {"c"};
  p.min_tokens = 1;
  Output out(p);
  out.pieces = {{5, "c"}, {6, "xc"}};
  const Verdict v = Pass({5, 6}, {5, 6, 7}, out);
  CHECK(v.ended);
  CHECK(out.text == "cx");
}

TEST_CASE("max_tokens cuts the kept guesses") {
  Output out(Params(3));
  out.tokens = {1};  // one token generated before this pass
  const Verdict v = Pass({5, 6, 7}, {5, 6, 7, 8}, out);
  CHECK(v.ended);
  CHECK(v.accepted == 1);
  CHECK(out.reason == "length");
  CHECK(out.tokens == std::vector<int32_t>{1, 5, 6});
}

TEST_CASE("a row that cannot be drawn from stops the pass where it is") {
  Output out(Params(100));
  const Verdict v = Pass({5, 6}, {5, -1}, out);
  CHECK(v.bad_row == 1);
  CHECK(v.accepted == 1);
  CHECK_FALSE(v.ended);
  CHECK(out.tokens == std::vector<int32_t>{5});
}

TEST_CASE("text that may begin a stop string is held back until it cannot, or the end") {
  SamplingParams p = Params(100);
  p.stop = {"xyz"};
  Output out(p);
  out.pieces = {{5, "ax"}, {6, "y"}, {7, "q"}, {8, "x"}};
  Pass({5, 6}, {5, 6, 7}, out);
  CHECK(out.text == "axyq");
  Pass({}, {8}, out);
  CHECK(out.text == "axyq");  // "x" held
  std::string held;
  CHECK(out.stops.Flush("y", &held).empty());  // "xy" may still become "xyz"
  CHECK(held == "xy");
}

}  // namespace
}  // namespace braid
