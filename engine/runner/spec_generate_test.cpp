// Speculative decoding in Generate on the bundled model: greedy output is
// the same token for token with every proposer, guesses are actually kept
// on repetitive text (so the roll-back path runs), and sampled output is
// plain sampling's for the same seed.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/model.h"

namespace braid {
namespace {

bool HaveModel() { return std::filesystem::exists(BRAID_MODEL_PATH); }

std::unique_ptr<Model> Open() {
  ModelOptions mo;
  mo.path = BRAID_MODEL_PATH;
  mo.threads = 2;
  mo.context = 1024;
  auto m = Model::Open(mo);
  REQUIRE(m.ok());
  return std::move(*m);
}

constexpr const char* kChat =
    "<|im_start|>user\nRepeat exactly: red, green, blue, red, green, blue.<|im_end|>\n"
    "<|im_start|>assistant\n";
const char* kTexts[] = {
    "one two three four five, one two three four five, one two three",
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Photosynthesis is the process by which green plants",
    kChat,
};

GenerateResult Run(Model& m, const std::vector<int32_t>& prompt, const SamplingParams& sp,
                   SpecOptions::Kind kind, int max_guesses = 8) {
  SpecOptions spec;
  spec.kind = kind;
  spec.max_tokens = max_guesses;
  std::unique_ptr<Model> draft;
  if (kind == SpecOptions::Kind::kDraft) {
    ModelOptions mo;
    mo.path = BRAID_MODEL_PATH;
    mo.threads = 2;
    auto d = OpenDraftModel(spec, mo, m);
    REQUIRE_MESSAGE(d.ok(), d.status().message());
    draft = std::move(*d);
  }
  auto r = Generate(m, prompt, sp, {}, spec, draft.get());
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("speculative greedy output equals plain greedy output, every proposer") {
  if (!HaveModel()) return;
  auto m = Open();
  SamplingParams sp = SamplingParams::Greedy();
  sp.max_tokens = 24;
  sp.ignore_eos = true;
  int accepted = 0;
  for (const char* text : kTexts) {
    const std::vector<int32_t> prompt = m->TokenizeRaw(text);
    const GenerateResult plain = Run(*m, prompt, sp, SpecOptions::Kind::kOff);
    CHECK(plain.spec_proposed == 0);
    for (auto kind :
         {SpecOptions::Kind::kNgram, SpecOptions::Kind::kSuffix, SpecOptions::Kind::kDraft})
      for (int guesses : {2, 8}) {
        const GenerateResult spec = Run(*m, prompt, sp, kind, guesses);
        INFO(text << " / " << static_cast<int>(kind) << " / " << guesses);
        CHECK(spec.tokens == plain.tokens);
        CHECK(spec.text == plain.text);
        CHECK(spec.spec_accepted <= spec.spec_proposed);
        accepted += spec.spec_accepted;
      }
  }
  CHECK(accepted > 0);  // the repetitive prompts keep guesses
}

TEST_CASE("speculation stops where plain generation stops: max_tokens, stop strings, EOG") {
  if (!HaveModel()) return;
  auto m = Open();
  const std::vector<int32_t> prompt = m->TokenizeRaw(kTexts[0]);
  for (int n : {1, 2, 5}) {
    SamplingParams sp = SamplingParams::Greedy();
    sp.max_tokens = n;
    sp.ignore_eos = true;
    const GenerateResult r = Run(*m, prompt, sp, SpecOptions::Kind::kNgram);
    CHECK(static_cast<int>(r.tokens.size()) == n);
    CHECK(r.finish_reason == "length");
  }
  SamplingParams sp = SamplingParams::Greedy();
  sp.max_tokens = 40;
  sp.stop = {"five"};
  const GenerateResult plain = Run(*m, prompt, sp, SpecOptions::Kind::kOff);
  const GenerateResult spec = Run(*m, prompt, sp, SpecOptions::Kind::kNgram);
  CHECK(spec.text == plain.text);
  CHECK(spec.finish_reason == plain.finish_reason);
  SamplingParams eog = SamplingParams::Greedy();
  eog.max_tokens = 64;
  const std::vector<int32_t> chat = m->TokenizeRaw(kTexts[4]);
  const GenerateResult a = Run(*m, chat, eog, SpecOptions::Kind::kOff);
  const GenerateResult b = Run(*m, chat, eog, SpecOptions::Kind::kSuffix);
  CHECK(a.tokens == b.tokens);
  CHECK(a.finish_reason == b.finish_reason);
}

TEST_CASE("speculative sampling gives plain sampling's output for the same seed") {
  if (!HaveModel()) return;
  auto m = Open();
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.max_tokens = 24;
  sp.ignore_eos = true;
  sp.seed = 7;
  const std::vector<int32_t> prompt = m->TokenizeRaw(kTexts[0]);
  const GenerateResult plain = Run(*m, prompt, sp, SpecOptions::Kind::kOff);
  CHECK(plain.tokens.size() == 24);
  for (auto kind :
       {SpecOptions::Kind::kNgram, SpecOptions::Kind::kSuffix, SpecOptions::Kind::kDraft}) {
    const GenerateResult spec = Run(*m, prompt, sp, kind);
    CHECK(spec.tokens == plain.tokens);
    CHECK(spec.spec_proposed > 0);
  }
}

}  // namespace
}  // namespace braid
