#include "spec/proposer.h"

#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "engine/spec.h"
#include "spec/goodput.h"

namespace braid::spec {
namespace {

using Ids = std::vector<int32_t>;

Ids Ngram(const Ids& context, int k) {
  NgramProposer p;
  Ids out = {99};
  p.Propose(context, k, &out);
  return out;
}

TEST_CASE("ngram: the tokens after the most recent earlier match of the longest tail") {
  CHECK(Ngram({1, 2, 3, 4, 1, 2}, 4) == Ids{3, 4, 1, 2});
  CHECK(Ngram({1, 2, 3, 4, 1, 2}, 2) == Ids{3, 4});
  CHECK(Ngram({1, 2, 9, 1, 2, 7, 1, 2}, 3) == Ids{7, 1, 2});
  // Past the context's end the copy overlaps itself: the period goes on.
  CHECK(Ngram({1, 2, 3, 4, 1, 2}, 8) == Ids{3, 4, 1, 2, 3, 4, 1, 2});
  CHECK(Ngram({5, 9, 9, 9}, 5) == Ids{9, 9, 9, 9, 9});
  // The longer tail wins over a more recent shorter one: [5 1 2] matches at 0.
  CHECK(Ngram({5, 1, 2, 8, 3, 1, 2, 6, 5, 1, 2}, 2) == Ids{8, 3});
  CHECK(Ngram({1, 2, 3}, 4).empty());
  CHECK(Ngram({}, 4).empty());
  CHECK(Ngram({7}, 4).empty());
  CHECK(Ngram({7, 7, 7}, 4) == Ids{7, 7, 7, 7});
  CHECK(Ngram({7, 7}, 4).empty());  // a 1-gram match is too weak a guess
  CHECK(Ngram({1, 2, 1, 2}, 0).empty());
}

Ids Suffix(const SuffixIndex& index, const Ids& context, int k, float min_share = 0.0f) {
  Ids out = {99};
  index.Propose(context, k, min_share, &out);
  return out;
}

TEST_CASE("suffix index: the most frequent continuation of the longest matched suffix") {
  SuffixIndex index;
  index.Add(Ids{5, 6, 7, 8});
  index.Add(Ids{5, 6, 7, 9});
  index.Add(Ids{5, 6, 7, 9});
  CHECK(Suffix(index, {1, 5, 6}, 4) == Ids{7, 9});
  CHECK(Suffix(index, {1, 5, 6}, 1) == Ids{7});
  CHECK(Suffix(index, {6, 7}, 4) == Ids{9});
  CHECK(Suffix(index, {3, 4}, 4).empty());
  // 9 follows [5 6 7] 2 times out of 3: below a share of 0.7 it stops there.
  CHECK(Suffix(index, {5, 6}, 4, 0.7f) == Ids{7});
}

TEST_CASE("suffix index: guesses run past the depth bound by matching again") {
  SuffixIndex index(/*max_depth=*/4);
  Ids seq;
  for (int i = 1; i <= 12; ++i) seq.push_back(i);
  index.Add(seq);
  CHECK(Suffix(index, {1, 2, 3}, 6) == Ids{4, 5, 6, 7, 8, 9});
  CHECK(Suffix(index, {10, 11}, 6) == Ids{12});
}

TEST_CASE("suffix index: extending piece by piece builds the same trie as adding at once") {
  const Ids seq = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3};
  SuffixIndex whole(8), pieces(8);
  whole.Add(seq);
  for (size_t n = 1; n <= seq.size(); n += 3) {
    const size_t upto = std::min(seq.size(), n + 2);
    pieces.Extend(std::span<const int32_t>(seq.data(), upto), n - 1);
  }
  CHECK(whole.nodes() == pieces.nodes());
  for (size_t cut = 1; cut < seq.size(); ++cut) {
    const Ids ctx(seq.begin(), seq.begin() + cut);
    CHECK(Suffix(whole, ctx, 5) == Suffix(pieces, ctx, 5));
  }
}

TEST_CASE("suffix index: bounded in nodes") {
  SuffixIndex index(16, 100);
  Ids seq;
  for (int i = 0; i < 1000; ++i) seq.push_back(i % 97);
  index.Add(seq);
  CHECK(index.nodes() <= 100);
  index.Clear();
  CHECK(index.nodes() == 1);
}

TEST_CASE("suffix proposer: its own context, and a shared index of siblings' outputs") {
  SuffixProposer own(nullptr);
  Ids out;
  own.Propose(Ids{4, 5, 6, 7, 4, 5}, 3, &out);
  CHECK(out == Ids{6, 7, 4});
  // The context grows between calls; only new tokens are indexed.
  own.Propose(Ids{4, 5, 6, 7, 4, 5, 6, 7, 4}, 2, &out);
  CHECK(out == Ids{5, 6});

  SuffixStore store;
  auto shared = store.For("summarize");
  CHECK(store.For("summarize") == shared);
  CHECK(store.For("other") != shared);
  shared->Add(Ids{10, 11, 12, 13, 14});
  SuffixProposer sibling(shared);
  sibling.Propose(Ids{1, 2, 10, 11}, 3, &out);
  CHECK(out == Ids{12, 13, 14});
  // Bounded: the least recently used group goes first.
  SuffixStore small(2, 100);
  auto a = small.For("a");
  auto b = small.For("b");
  CHECK(small.For("a") == a);
  small.For("c");
  CHECK(small.groups() == 2);
  CHECK(small.For("a") == a);
  CHECK(small.For("b") != b);  // "b" was dropped and starts over
  a->Add(Ids(500, 7));
  for (int i = 0; i < 300; ++i) a->Add(Ids{i, i + 1, i + 2});
  CHECK(a->nodes() <= 100);
}

TEST_CASE("suffix index: every path's count is its number of occurrences, however it grew") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const int depth = 2 + trial % 6;
    Ids a(40 + trial * 3), b(30);
    for (auto& t : a) t = static_cast<int32_t>(rng() % 3);
    for (auto& t : b) t = static_cast<int32_t>(rng() % 3);
    SuffixIndex whole(depth), pieces(depth), appended(depth);
    whole.Add(a);
    whole.Add(b);
    const size_t cut = a.size() / 3;
    pieces.Extend(std::span<const int32_t>(a.data(), cut), 0);
    pieces.Extend(a, cut);
    pieces.Add(b);
    std::vector<int32_t> cursor;
    for (int32_t t : a) appended.Append(&cursor, t);
    cursor.clear();
    for (int32_t t : b) appended.Append(&cursor, t);
    for (const Ids* seq : {&a, &b})
      for (size_t i = 0; i < seq->size(); ++i)
        for (int len = 1; len <= depth && i + len <= seq->size(); ++len) {
          const Ids path(seq->begin() + i, seq->begin() + i + len);
          uint32_t expected = 0;
          for (const Ids* s : {&a, &b})
            for (size_t j = 0; j + len <= s->size(); ++j)
              expected += std::equal(path.begin(), path.end(), s->begin() + j);
          INFO("trial " << trial << " at " << i << " length " << len);
          REQUIRE(whole.Count(path) == expected);
          REQUIRE(pieces.Count(path) == expected);
          REQUIRE(appended.Count(path) == expected);
        }
    Ids too_long(a.begin(), a.begin() + depth + 1);
    CHECK(whole.Count(too_long) == 0);
  }
}

TEST_CASE("goodput: a plain step first, longer ones in stages, then what pays") {
  StepCost cost(64);
  const Candidate sure[] = {{1.0, 8}};
  CHECK(ChooseGuesses(cost, 1, 1, sure)[0] == 0);
  cost.Observe(1, 1.0);
  CHECK(ChooseGuesses(cost, 1, 1, sure)[0] == 1);
  cost.Observe(2, 1.05);
  CHECK(ChooseGuesses(cost, 1, 1, sure)[0] == 2);
  cost.Observe(3, 1.1);
  CHECK(ChooseGuesses(cost, 1, 1, sure)[0] == 4);
  // A step of n tokens costs 1 + 0.05 (n - 1): checking is nearly free.
  for (int n = 1; n <= 40; ++n) cost.Observe(n, 1.0 + 0.05 * (n - 1));
  CHECK(ChooseGuesses(cost, 1, 1, sure)[0] == 8);
  // Guesses that never hold are not worth checking.
  const Candidate never[] = {{0.0, 8}};
  CHECK(ChooseGuesses(cost, 1, 1, never)[0] == 0);
  // Two sequences: the guesses go where they hold, best first.
  const Candidate two[] = {{0.9, 4}, {0.2, 4}};
  std::vector<int> k = ChooseGuesses(cost, 2, 2, two);
  CHECK(k[0] == 4);
  CHECK(k[1] <= 1);
  CHECK(GuessCouldPay(cost, 1, 1));
  // Costly steps (each token as dear as a step) never pay.
  StepCost dear(16);
  for (int n = 1; n <= 16; ++n) dear.Observe(n, static_cast<double>(n));
  const Candidate good[] = {{0.75, 4}};
  CHECK(ChooseGuesses(dear, 1, 1, good)[0] == 0);
  CHECK(!GuessCouldPay(dear, 1, 1));
  CHECK(!GuessCouldPay(dear, 16, 16));  // the largest step the table holds
  // Midway: half the guesses hold, a step of n costs 1 + 0.25 (n - 1).
  StepCost mid(16);
  for (int n = 1; n <= 16; ++n) mid.Observe(n, 1.0 + 0.25 * (n - 1));
  const Candidate half[] = {{0.5, 8}};
  const int m = ChooseGuesses(mid, 1, 1, half)[0];
  CHECK(m >= 1);
  CHECK(m <= 3);
  // Sequences whose guesses all hold share the guesses a step can take.
  const Candidate sure4[] = {{1.0, 8}, {1.0, 8}, {1.0, 8}, {1.0, 8}};
  StepCost knee(64);
  for (int n = 1; n <= 64; ++n) knee.Observe(n, n <= 12 ? 1.0 : 1.0 + 0.5 * (n - 12));
  k = ChooseGuesses(knee, 4, 4, sure4);
  CHECK(k == std::vector<int>{2, 2, 2, 2});
  // A step never outgrows the largest size the cost table holds.
  const Candidate many[] = {{1.0, 32}, {1.0, 32}, {1.0, 32}};
  k = ChooseGuesses(cost, 3, 3, many);
  CHECK(3 + k[0] + k[1] + k[2] <= 64);
}

TEST_CASE("step cost: a size not measured for a while is forgotten, and tried again") {
  StepCost cost(16);
  for (int n = 1; n <= 4; ++n) cost.Observe(n, 1.0 + 0.01 * n);
  cost.Observe(3, 50.0);  // a one-off slow step (say, a kernel's first use)
  const Candidate sure[] = {{1.0, 8}};
  CHECK(ChooseGuesses(cost, 1, 1, sure)[0] <= 1);  // size 3 and above look dear
  for (uint64_t i = 0; i < StepCost::kForget + 1; ++i) cost.Observe(1, 1.01);
  CHECK(cost.largest() == 1);
  CHECK(ChooseGuesses(cost, 1, 1, sure)[0] == 1);  // grown again in stages
  cost.Observe(2, 1.02);
  CHECK(ChooseGuesses(cost, 1, 1, sure)[0] == 2);
}

TEST_CASE("acceptance: a moving rate, and a probe every 16 idle steps") {
  Acceptance a;
  for (int i = 0; i < 50; ++i) a.Observe(8, 8);
  CHECK(a.rate() > 0.95);
  for (int i = 0; i < 50; ++i) a.Observe(4, 0);
  CHECK(a.rate() < 0.05);
  int probes = 0;
  for (int i = 0; i < 32; ++i) probes += a.Probe();
  CHECK(probes == 2);
}

TEST_CASE("probes of a costly proposer back off while its guesses fail") {
  ProbeSchedule p;
  auto due_in = [&] {
    int n = 1;
    while (!p.Due()) ++n;
    return n;
  };
  CHECK(due_in() == 16);
  p.Observe(0);
  CHECK(due_in() == 32);
  for (int i = 0; i < 20; ++i) p.Observe(0);
  CHECK(p.interval() == 4096);
  CHECK(due_in() == 4096);
  p.Observe(1);  // a guess held: probe more often again
  CHECK(due_in() == 2048);
  for (int i = 0; i < 20; ++i) p.Observe(2);
  CHECK(due_in() == 16);
  CHECK(Acceptance(0.05).rate() == 0.05);
}

TEST_CASE("spec options parse") {
  CHECK(ParseSpecOptions("off").value().kind == SpecOptions::Kind::kOff);
  auto n = ParseSpecOptions("ngram:5");
  REQUIRE(n.ok());
  CHECK(n.value().kind == SpecOptions::Kind::kNgram);
  CHECK(n.value().max_tokens == 5);
  CHECK(ParseSpecOptions("suffix").value().max_tokens == 8);
  CHECK(ParseSpecOptions("suffix").value().adaptive);
  auto f = ParseSpecOptions("ngram:4:fixed");
  REQUIRE(f.ok());
  CHECK(f.value().max_tokens == 4);
  CHECK(!f.value().adaptive);
  CHECK(!ParseSpecOptions("ngram:fixed").value().adaptive);
  CHECK(!ParseSpecOptions("ngram:4:5").ok());
  CHECK(!ParseSpecOptions("ngram:fixed:fixed").ok());
  CHECK(!ParseSpecOptions("ngram:").ok());
  CHECK(!ParseSpecOptions("ngram:4:bogus").ok());
  auto d = ParseSpecOptions("draft");
  REQUIRE(d.ok());
  CHECK(d.value().kind == SpecOptions::Kind::kDraft);
  CHECK(d.value().draft_layers == 0);
  CHECK(d.value().draft_model.empty());
  auto dl = ParseSpecOptions("draft=6:3:fixed");
  REQUIRE(dl.ok());
  CHECK(dl.value().draft_layers == 6);
  CHECK(dl.value().max_tokens == 3);
  CHECK(!dl.value().adaptive);
  auto dm = ParseSpecOptions("draft=models/small.gguf:4");
  REQUIRE(dm.ok());
  CHECK(dm.value().draft_model == "models/small.gguf");
  CHECK(dm.value().max_tokens == 4);
  CHECK(!ParseSpecOptions("draft=").ok());
  CHECK(!ParseSpecOptions("draft=0").ok());
  CHECK(!ParseSpecOptions("ngram=3").ok());
  CHECK(!ParseSpecOptions("ngram:0").ok());
  CHECK(!ParseSpecOptions("ngram:x").ok());
  CHECK(ParseSpecOptions("bogus").status().message().find("bogus") != std::string::npos);
}

}  // namespace
}  // namespace braid::spec
