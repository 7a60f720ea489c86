// Speculative decoding in the serving engine on the bundled model: 50
// prompts, batched and one at a time, give the same greedy tokens with every
// proposer (the draft model's too) as without speculation, guesses are kept on repetitive text, the
// suffix proposer learns from finished siblings of its group, sampling keeps
// each request's seeded output, and the KV pool is whole afterwards.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace braid {
namespace {

bool HaveModel() { return std::filesystem::exists(BRAID_MODEL_PATH); }

std::unique_ptr<Engine> OpenEngine(SpecOptions::Kind kind, bool adaptive = true) {
  EngineOptions o;
  o.model.path = BRAID_MODEL_PATH;
  o.model.threads = 2;
  o.model.context = 1024;
  o.kv_tokens = 16384;
  o.max_batch_tokens = 128;
  o.spec.kind = kind;
  o.spec.adaptive = adaptive;
  if (kind == SpecOptions::Kind::kDraft) {  // a cheap draft: its first 4 layers, 2 guesses
    o.spec.draft_layers = 4;
    o.spec.max_tokens = 2;
  }
  auto e = Engine::Open(o);
  REQUIRE(e.ok());
  return std::move(*e);
}

// 50 prompts, most of them repetitive (lists, code, quoted text), so that
// guesses hold and the roll-back path runs.
std::vector<std::string> Texts() {
  const char* base[] = {
      "one two three four five, one two three four five, one two",
      "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, "
      "b):\n",
      "The quick brown fox jumps over the lazy dog. The quick brown fox",
      "Photosynthesis is the process by which green plants",
      "<|im_start|>user\nRepeat: red, green, blue, red, green, blue.<|im_end|>\n"
      "<|im_start|>assistant\n",
      "Monday, Tuesday, Wednesday, Thursday, Friday, Monday, Tuesday,",
      "A: 1\nB: 2\nC: 3\nD: 4\nE:",
      "Once upon a time, in a small village by the sea, there lived",
      "SELECT name FROM users; SELECT name FROM orders; SELECT",
      "Q: What is 12 times 7?\nA:",
  };
  std::vector<std::string> out;
  for (int i = 0; i < 50; ++i) {
    std::string t = base[i % 10];
    for (int r = 0; r < i / 10; ++r) t = "Again: " + t;
    out.push_back(t);
  }
  return out;
}

GenerationRequest Greedy(Engine& e, const std::string& text, int max_tokens) {
  GenerationRequest g;
  g.prompt = e.model()->TokenizeRaw(text);
  g.sampling = SamplingParams::Greedy();
  g.sampling.max_tokens = max_tokens;
  g.sampling.ignore_eos = true;
  g.spec_group = "test";
  return g;
}

// Every prompt's tokens: all submitted at once, or each after the last finished.
std::vector<std::vector<int32_t>> RunAll(Engine& e, const std::vector<std::string>& texts,
                                         bool batched, int max_tokens) {
  std::vector<std::vector<int32_t>> out;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const std::string& t : texts) {
    auto h = e.Submit(Greedy(e, t, max_tokens));
    REQUIRE(h.ok());
    if (batched) {
      handles.push_back(*h);
    } else {
      out.push_back((*h)->Wait().tokens);
    }
  }
  for (auto& h : handles) out.push_back(h->Wait().tokens);
  return out;
}

TEST_CASE("serving speculative greedy output equals plain, batched and alone") {
  if (!HaveModel()) return;
  const std::vector<std::string> texts = Texts();
  constexpr int kTokens = 16;
  auto plain = OpenEngine(SpecOptions::Kind::kOff);
  const auto expected = RunAll(*plain, texts, /*batched=*/true, kTokens);
  CHECK(RunAll(*plain, texts, /*batched=*/false, kTokens) == expected);
  CHECK(plain->stats().spec_proposed == 0);
  plain.reset();
  for (auto kind :
       {SpecOptions::Kind::kNgram, SpecOptions::Kind::kSuffix, SpecOptions::Kind::kDraft}) {
    // Every guess offered is checked (the adaptive choice may check few on
    // a host where checking is dear); the adaptive one runs in the other tests.
    auto e = OpenEngine(kind, /*adaptive=*/false);
    for (bool batched : {true, false}) {
      INFO("proposer " << static_cast<int>(kind) << (batched ? " batched" : " alone"));
      const auto got = RunAll(*e, texts, batched, kTokens);
      REQUIRE(got.size() == expected.size());
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("prompt " << i << ": " << texts[i]);
        CHECK(got[i] == expected[i]);
      }
    }
    EngineStats s = e->stats();
    // The last step's gauges are refreshed just after its requests finish
    // (the minute is only a bound on a hang).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (s.kv_blocks_free + s.kv_blocks_cached != s.kv_blocks_total &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s = e->stats();
    }
    CHECK(s.spec_accepted > 0);
    CHECK(s.spec_accepted <= s.spec_proposed);
    CHECK(s.decode_tokens_out > s.decode_passes);  // more than one token a pass
    CHECK(s.kv_blocks_free + s.kv_blocks_cached == s.kv_blocks_total);
  }
}

TEST_CASE("the suffix proposer guesses from the finished outputs of its group") {
  if (!HaveModel()) return;
  auto e = OpenEngine(SpecOptions::Kind::kSuffix, /*adaptive=*/false);
  // A prompt without repetition: only an earlier sibling's output helps.
  const std::string text = "Photosynthesis is the process by which green plants";
  const Completion first = (*e->Submit(Greedy(*e, text, 32)))->Wait();
  const Completion second = (*e->Submit(Greedy(*e, text, 32)))->Wait();
  CHECK(second.tokens == first.tokens);
  CHECK(second.spec_accepted > first.spec_accepted);
  CHECK(second.spec_accepted >= 16);
  // Another group learns nothing from it.
  GenerationRequest other = Greedy(*e, text, 32);
  other.spec_group = "other";
  const Completion third = (*e->Submit(other))->Wait();
  CHECK(third.tokens == first.tokens);
  CHECK(third.spec_accepted < second.spec_accepted);
}

TEST_CASE("serving speculative sampling keeps each request's seeded output") {
  if (!HaveModel()) return;
  auto run = [](SpecOptions::Kind kind) {
    auto e = OpenEngine(kind);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 8; ++i) {
      GenerationRequest g = Greedy(*e, Texts()[i], 24);
      g.sampling = SamplingParams();
      g.sampling.temperature = 0.8f;
      g.sampling.max_tokens = 24;
      g.sampling.ignore_eos = true;
      g.sampling.seed = 100 + i;
      hs.push_back(*e->Submit(g));
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& h : hs) out.push_back(h->Wait().tokens);
    return out;
  };
  const auto plain = run(SpecOptions::Kind::kOff);
  CHECK(run(SpecOptions::Kind::kNgram) == plain);
  CHECK(run(SpecOptions::Kind::kSuffix) == plain);
  CHECK(run(SpecOptions::Kind::kDraft) == plain);
}

}  // namespace
}  // namespace braid
