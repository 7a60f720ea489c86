// The serving engine end to end on the bundled model: batching must not
// change greedy outputs, the prefix cache must serve repeated prefixes,
// cancellation must free blocks, bad requests must be refused cleanly.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "runner/logits_fixture.h"

namespace braid {
namespace {

bool HaveModel() { return std::filesystem::exists(BRAID_MODEL_PATH); }

EngineOptions Options(int kv_tokens) {
  EngineOptions o;
  o.model.path = BRAID_MODEL_PATH;
  o.model.threads = 1;
  o.model.context = 2048;
  o.model.cpu.exact = getenv("EXACT") != nullptr;
  o.kv_tokens = kv_tokens;
  o.max_batch_tokens = 64;
  return o;
}

// Prompts of mixed lengths built from real text, as token ids.
std::vector<std::vector<int32_t>> Prompts(Model& m, int count) {
  const char* texts[] = {
      "The history of the printing press begins",
      "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
      "List three facts about the Moon:",
      "Once upon a time, in a small village by the sea, there lived",
      "The quick brown fox",
      "Photosynthesis is the process by which green plants",
      "Q: What is 12 times 7?\nA:",
      "<|im_start|>user\nWrite a haiku about autumn.<|im_end|>\n<|im_start|>assistant\n",
  };
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    std::string t = texts[i % 8];
    for (int r = 0; r < i / 8; ++r) t += " And then, again:";
    out.push_back(m.TokenizeRaw(t));
  }
  return out;
}

// Every prompt submitted as a greedy request of exactly max_tokens tokens.
std::vector<std::shared_ptr<RequestHandle>> SubmitGreedy(
    Engine& e, const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : prompts) {
    GenerationRequest g;
    g.prompt = p;
    g.sampling = SamplingParams::Greedy();
    g.sampling.max_tokens = max_tokens;
    g.sampling.ignore_eos = true;
    auto h = e.Submit(g);
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  return handles;
}

std::vector<int32_t> Alone(Model& m, const std::vector<int32_t>& prompt, int max_tokens) {
  SamplingParams sp = SamplingParams::Greedy();
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  auto r = Generate(m, prompt, sp);
  REQUIRE(r.ok());
  return r->tokens;
}

TEST_CASE("Engine::Open refuses bad options with an error naming the option") {
  // Checked before the model is read, so no model is needed.
  struct Bad {
    const char* name;
    void (*set)(EngineOptions&);
  };
  const Bad cases[] = {
      {"block_size", [](EngineOptions& o) { o.block_size = 0; }},
      {"max_running", [](EngineOptions& o) { o.max_running = -1; }},
      {"max_batch_tokens", [](EngineOptions& o) { o.max_batch_tokens = -1; }},
      {"latency_batch_tokens", [](EngineOptions& o) { o.latency_batch_tokens = -1; }},
      {"step_ms", [](EngineOptions& o) { o.step_ms = -1; }},
      {"step_ms", [](EngineOptions& o) { o.step_ms = std::nan(""); }},
      {"policy", [](EngineOptions& o) { o.policy = "lifo"; }},
  };
  for (const Bad& b : cases) {
    EngineOptions o = Options(4096);
    b.set(o);
    auto e = Engine::Open(o);
    INFO(b.name);
    REQUIRE(!e.ok());
    CHECK(e.status().message().find(b.name) != std::string::npos);
  }
}

TEST_CASE("Engine::Open: a step takes at most the backend's chunk of tokens") {
  EngineOptions o = Options(4096);
  o.model.path = std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/models/llama_tiny";
  o.model.require_tokenizer = false;  // the fixture has none: ids only
  o.model.context = 64;
  o.model.cpu.stream = CpuOptions::Stream::kTemporal;
  o.max_batch_tokens = 257;
  auto bad = Engine::Open(o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "max_batch_tokens must be in [1, 256], got 257");
  o.max_batch_tokens = 256;
  auto good = Engine::Open(o);
  CHECK_MESSAGE(good.ok(), good.status().ToString());
}

// A tiny fixture model's transformers continuations (64 greedy tokens per
// prompt) run through the serving engine with `o` (pool and steps set by
// the caller): every continuation must be transformers', and the pool
// whole again once they are done. Returns the preemptions.
int RunFixtureContinuations(const std::string& name, EngineOptions o, EngineStats* stats) {
  auto records =
      ReadLogitsFixture(std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/logits/" + name + ".bin");
  REQUIRE_MESSAGE(records.ok(), records.status().ToString());
  std::vector<std::vector<int32_t>> prompts;
  for (const LogitsRecord& r : *records) prompts.push_back(r.ids);
  o.model.path = std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
  o.model.require_tokenizer = false;  // the fixture has none: ids only
  o.model.context = 128;
  o.model.cpu.exact = true;
  auto engine = Engine::Open(o);
  REQUIRE_MESSAGE(engine.ok(), engine.status().ToString());
  auto handles = SubmitGreedy(**engine, prompts, 64);
  int preemptions = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    CAPTURE(i);
    Completion c = handles[i]->Wait();
    CHECK(c.finish_reason == "length");
    CHECK(c.tokens == (*records)[i].gen);
    preemptions += c.preemptions;
  }
  *stats = (*engine)->stats();
  CHECK(stats->kv_blocks_free + stats->kv_blocks_cached == stats->kv_blocks_total);
  return preemptions;
}

TEST_CASE("a model whose layers all slide runs in a pool shorter than its sequences") {
  // mistral_sliding_tiny: window 8 in both layers. Its six prompts (1 to 40
  // tokens) continue 64 tokens each, up to 104 positions, all at once in a
  // pool of 4 blocks (64 positions): it works only because blocks that fall
  // out of the window are let go (a sequence holds at most its prompt's 3
  // blocks, or the window and a step's 16 tokens). Admission keeping KV for
  // growth, and none (preemptions and recomputes): the continuations are
  // transformers'.
  for (double reserve : {0.5, 0.0}) {
    CAPTURE(reserve);
    EngineOptions o = Options(4 * 16);
    o.max_batch_tokens = 16;
    o.kv_growth_reserve = reserve;
    EngineStats s;
    const int preemptions = RunFixtureContinuations("mistral_sliding_tiny", o, &s);
    MESSAGE("KV growth reserve " << reserve << ": " << preemptions << " preemptions");
    if (reserve == 0) CHECK(preemptions > 0);
    CHECK(s.kv_blocks_total == 4);
  }
}

TEST_CASE("a hybrid model keeps its sliding layers in few slides, taken back and reused") {
  // gemma3_tiny: layers sliding, full, sliding, window 8. Its six prompts
  // (1 to 40 tokens) continue 64 tokens each, up to 104 positions, two at a
  // time, in a pool of 10 blocks (a sequence needs up to 7) with 8 slides
  // (2 running x (8 + 16 tokens in 16-token blocks, and one at each end)):
  // slides outside a window go to other blocks, and a preempted sequence's
  // cached prefix is reused only as far as its last window's slides are
  // still there. Admission keeping KV for growth, and none (preemptions);
  // with slides and without: the continuations are transformers'.
  for (bool slides : {true, false})
    for (double reserve : {0.5, 0.0}) {
      CAPTURE(slides);
      CAPTURE(reserve);
      EngineOptions o = Options(10 * 16);
      o.max_batch_tokens = 16;
      o.max_running = 2;
      o.kv_growth_reserve = reserve;
      o.kv_slides = slides;
      EngineStats s;
      const int preemptions = RunFixtureContinuations("gemma3_tiny", o, &s);
      MESSAGE("slides " << slides << ", reserve " << reserve << ": " << preemptions
                        << " preemptions, " << s.kv_slides_taken_back << " slides taken back");
      CHECK(s.kv_blocks_total == 10);
      CHECK(s.kv_slides_total == (slides ? 8 : 0));
      if (slides) CHECK(s.kv_slides_taken_back > 0);
    }
}

TEST_CASE("batched greedy decoding equals one request at a time, with preemption") {
  if (!HaveModel()) return;
  // A pool far too small for all 32 at once (40 blocks of 16 tokens, while
  // each request alone needs up to 6), and admission keeping no KV for
  // growth: forces preemption by recompute.
  EngineOptions o = Options(40 * 16);
  o.kv_growth_reserve = 0;
  auto engine = Engine::Open(o);
  REQUIRE(engine.ok());
  Engine& e = **engine;
  auto prompts = Prompts(*e.model(), 32);
  std::vector<int> lengths;
  for (int i = 0; i < 32; ++i) lengths.push_back(8 + (i * 7) % 40);

  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 32; ++i) {
    GenerationRequest g;
    g.prompt = prompts[i];
    g.sampling = SamplingParams::Greedy();
    g.sampling.max_tokens = lengths[i];
    g.sampling.ignore_eos = true;
    auto h = e.Submit(g);
    REQUIRE(h.ok());
    handles.push_back(*h);
    // Half of them arrive while the first ones are decoding.
    if (i == 15) REQUIRE(handles[0]->Next(60000).has_value());
  }
  int preemptions = 0;
  std::vector<Completion> results;
  for (auto& h : handles) results.push_back(h->Wait());
  for (auto& c : results) preemptions += c.preemptions;
  MESSAGE("preemptions: " << preemptions);
  CHECK(preemptions > 0);
  for (int i = 0; i < 32; ++i) {
    CAPTURE(i);
    CHECK(results[i].finish_reason == "length");
    CHECK(results[i].tokens == Alone(*e.model(), prompts[i], lengths[i]));
  }
  EngineStats s = e.stats();
  CHECK(s.running == 0);
  CHECK(s.waiting == 0);
  CHECK(s.kv_blocks_free + s.kv_blocks_cached == s.kv_blocks_total);
}

// With 2 threads a step of many decodes runs as one team per thread (each
// thread all the layers over its own sequences), a single sequence as one team
// of both threads: the tokens must not depend on which, for every KV type the
// fast path uses and both activation precisions.
TEST_CASE("batched greedy decoding on 2 threads (a team per thread) equals one request at a time") {
  if (!HaveModel()) return;
  struct Config {
    CpuOptions::Precision precision;
    CpuOptions::KvCache kv;
  };
  for (Config cfg : {Config{CpuOptions::Precision::kSplit16, CpuOptions::KvCache::kF16},
                     Config{CpuOptions::Precision::kInt8, CpuOptions::KvCache::kQ8}}) {
    EngineOptions o = Options(64 * 64);
    o.model.threads = 2;
    o.model.cpu.precision = cfg.precision;
    o.model.cpu.kv_cache = cfg.kv;
    auto engine = Engine::Open(o);
    REQUIRE(engine.ok());
    Engine& e = **engine;
    const int n = 12;
    auto prompts = Prompts(*e.model(), n);
    auto handles = SubmitGreedy(e, prompts, 24);
    for (int i = 0; i < n; ++i) {
      CAPTURE(i);
      CAPTURE(static_cast<int>(cfg.kv));
      CHECK(handles[i]->Wait().tokens == Alone(*e.model(), prompts[i], 24));
    }
  }
}

// The stage profile: off, nothing is timed; on, every decode-only pass of
// every thread is split into the forward pass's stages, which add up to no
// more than the wall time of the generation, and the matmul and attention
// stages take time.
TEST_CASE("the stage profile times decode-only passes per thread and stage") {
  if (!HaveModel()) return;
  for (bool on : {false, true}) {
    EngineOptions o = Options(64 * 64);
    o.model.threads = 2;
    o.model.cpu.profile_stages = on;
    auto engine = Engine::Open(o);
    REQUIRE(engine.ok());
    Engine& e = **engine;
    auto prompts = Prompts(*e.model(), 8);
    const auto t0 = std::chrono::steady_clock::now();
    auto handles = SubmitGreedy(e, prompts, 12);
    for (auto& h : handles) CHECK(h->Wait().tokens.size() == 12);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineStats s = e.stats();
    CAPTURE(on);
    if (!on) {
      CHECK(s.profiled_passes == 0);
      CHECK(s.forward_stages.empty());
      continue;
    }
    // 11 decode steps at least (the first token of each comes from its prompt's pass).
    CHECK(s.profiled_passes >= 11);
    REQUIRE(s.forward_stages.size() == 9);
    std::vector<double> total(2, 0.0);
    for (const auto& st : s.forward_stages) {
      CAPTURE(st.stage);
      REQUIRE(st.seconds.size() == 2);
      for (int t = 0; t < 2; ++t) {
        CHECK(st.seconds[t] >= 0.0);
        total[t] += st.seconds[t];
      }
    }
    for (int t = 0; t < 2; ++t) {
      CHECK(total[t] > 0.0);
      CHECK(total[t] <= wall);
    }
    for (const char* busy : {"Q, K, V matmuls", "attention", "gate, up, SwiGLU", "output head"}) {
      CAPTURE(busy);
      const auto it =
          std::find_if(s.forward_stages.begin(), s.forward_stages.end(),
                       [&](const EngineStats::StageTime& st) { return st.stage == busy; });
      REQUIRE(it != s.forward_stages.end());
      CHECK(it->seconds[0] > 0.0);
      CHECK(it->seconds[1] > 0.0);
    }
  }
}

TEST_CASE("a repeated 1,000-token prefix comes from the cache; salts keep tenants apart") {
  if (!HaveModel()) return;
  auto engine = Engine::Open(Options(8192));
  REQUIRE(engine.ok());
  Engine& e = **engine;
  std::mt19937 rng(5);
  std::vector<int32_t> prefix(1000);
  for (int32_t& t : prefix) t = 100 + static_cast<int32_t>(rng() % 40000);
  auto run = [&](std::vector<int32_t> tail, uint64_t salt) {
    GenerationRequest g;
    g.prompt = prefix;
    g.prompt.insert(g.prompt.end(), tail.begin(), tail.end());
    g.sampling = SamplingParams::Greedy();
    g.sampling.max_tokens = 4;
    g.cache_salt = salt;
    auto h = e.Submit(g);
    REQUIRE(h.ok());
    return (*h)->Wait();
  };
  Completion first = run({11, 12, 13}, 1);
  Completion second = run({21, 22, 23, 24, 25}, 1);
  Completion other_tenant = run({21, 22, 23, 24, 25}, 2);
  CHECK(first.usage.cached_tokens == 0);
  CHECK(second.usage.cached_tokens >= 0.95 * second.usage.prompt_tokens);
  CHECK(other_tenant.usage.cached_tokens == 0);
  MESSAGE("TTFT cold " << first.timings.ttft_ms << " ms, warm " << second.timings.ttft_ms
                       << " ms, other salt " << other_tenant.timings.ttft_ms << " ms");
  CHECK(e.ProbePrefix(prefix, 1) >= 992);
  CHECK(e.ProbePrefix(prefix, 3) == 0);
}

// Agent-like turns: each program's second turn extends its first turn's
// prompt and output, announced with ExpectUse while the "tool" runs, in a
// pool too small for every context. Under every admission order, eviction
// order and admission rule, greedy outputs equal one request at a time.
TEST_CASE("a step-time target changes no greedy output") {
  if (!HaveModel()) return;
  // A target no step meets: prompts go in chunks of one block beside the decodes.
  EngineOptions o = Options(4096);
  o.step_ms = 0.001;
  auto engine = Engine::Open(o);
  REQUIRE_MESSAGE(engine.ok(), engine.status().ToString());
  Engine& e = **engine;
  auto prompts = Prompts(*e.model(), 4);
  for (auto& p : prompts) {  // 4 copies: prompts of several chunks each
    const std::vector<int32_t> once = p;
    for (int r = 0; r < 3; ++r) p.insert(p.end(), once.begin(), once.end());
  }
  std::vector<std::shared_ptr<RequestHandle>> hs = SubmitGreedy(e, prompts, 8);
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(hs[i]->Wait().tokens == Alone(*e.model(), prompts[i], 8));
  }
  CHECK(e.stats().prompt_tokens > 0);
}

TEST_CASE("agent serving switches change no greedy output") {
  if (!HaveModel()) return;
  struct Setting {
    const char* policy;
    const char* evict;
    bool anti_thrash;
  };
  const Setting settings[] = {{"fcfs", "lru", false},      {"priority", "next-use", true},
                              {"lpm", "lru", false},       {"plas", "next-use", true},
                              {"plas", "next-use", false}, {"fcfs", "lru", true}};
  for (const Setting& st : settings) {
    CAPTURE(st.policy);
    CAPTURE(st.evict);
    CAPTURE(st.anti_thrash);
    EngineOptions o = Options(10 * 16);  // about two contexts at once
    o.kv_growth_reserve = 0;
    o.policy = st.policy;
    o.evict = st.evict;
    o.anti_thrash = st.anti_thrash;
    auto engine = Engine::Open(o);
    REQUIRE_MESSAGE(engine.ok(), engine.status().ToString());
    Engine& e = **engine;
    auto prompts = Prompts(*e.model(), 6);
    std::vector<std::shared_ptr<RequestHandle>> first = SubmitGreedy(e, prompts, 12);
    std::vector<std::vector<int32_t>> second;
    std::vector<uint64_t> hints;
    for (size_t i = 0; i < prompts.size(); ++i) {
      Completion c = first[i]->Wait();
      CHECK(c.tokens == Alone(*e.model(), prompts[i], 12));
      std::vector<int32_t> context = prompts[i];
      context.insert(context.end(), c.tokens.begin(), c.tokens.end());
      hints.push_back(e.ExpectUse(context, 0, 10.0 * static_cast<double>(i)));
      std::vector<int32_t> obs = e.model()->TokenizeRaw(" Observation: it rained.");
      context.insert(context.end(), obs.begin(), obs.end());
      second.push_back(std::move(context));
    }
    std::vector<std::shared_ptr<RequestHandle>> turns = SubmitGreedy(e, second, 10);
    for (size_t i = 0; i < second.size(); ++i) {
      CAPTURE(i);
      CHECK(turns[i]->Wait().tokens == Alone(*e.model(), second[i], 10));
    }
    for (uint64_t h : hints) e.ForgetUse(h);
    EngineStats s = e.stats();
    const std::string name =
        std::string(st.policy) + " " + st.evict + (st.anti_thrash ? " anti-thrash" : "");
    MESSAGE(name << ": " << s.preemptions << " preemptions, " << s.cached_prompt_tokens
                 << " cached prompt tokens");
    CHECK(s.running == 0);
    CHECK(s.kv_blocks_free + s.kv_blocks_cached == s.kv_blocks_total);
  }
}

TEST_CASE("cancel frees the request's blocks at once") {
  if (!HaveModel()) return;
  auto engine = Engine::Open(Options(4096));
  REQUIRE(engine.ok());
  Engine& e = **engine;
  GenerationRequest g;
  g.prompt = e.model()->TokenizeText("Tell me a long story about a dragon.");
  g.sampling = SamplingParams::Greedy();
  g.sampling.max_tokens = 1000;
  g.sampling.ignore_eos = true;
  auto h = e.Submit(g);
  REQUIRE(h.ok());
  // Let it produce some tokens.
  for (int i = 0; i < 5; ++i) REQUIRE((*h)->Next(60000).has_value());
  (*h)->Cancel();
  Completion c = (*h)->Wait();
  CHECK(c.finish_reason == "cancelled");
  CHECK(c.tokens.size() < 1000);
  // The blocks are released before the request reports "cancelled"; the
  // stats gauges are refreshed at the end of that step (the minute is only a
  // bound on a hang).
  EngineStats s = e.stats();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (s.running != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = e.stats();
  }
  CHECK(s.kv_blocks_free + s.kv_blocks_cached == s.kv_blocks_total);
  CHECK(s.running == 0);
}

TEST_CASE("SetGoal raises a waiting request in place: it is admitted first") {
  if (!HaveModel()) return;
  EngineOptions o = Options(4096);
  o.max_running = 1;
  auto engine = Engine::Open(o);
  REQUIRE(engine.ok());
  Engine& e = **engine;
  GenerationRequest g;
  g.prompt = e.model()->TokenizeText("Tell me a long story about a dragon.");
  g.sampling = SamplingParams::Greedy();
  g.sampling.max_tokens = 1000;
  g.sampling.ignore_eos = true;
  auto busy = e.Submit(g);
  REQUIRE(busy.ok());
  REQUIRE((*busy)->Next(60000).has_value());  // running: it holds the only slot
  std::mutex mu;
  std::vector<char> first;  // which request produced its first token, in order
  auto submit = [&](char name) {
    GenerationRequest r;
    r.prompt = e.model()->TokenizeText(std::string("Say ") + name);
    r.sampling = SamplingParams::Greedy();
    r.sampling.max_tokens = 4;
    r.sampling.ignore_eos = true;
    bool seen = false;
    auto h = e.Submit(r, [&, name, seen](const Delta& d) mutable {
      if (seen || d.tokens.empty()) return;
      seen = true;
      std::lock_guard<std::mutex> lock(mu);
      first.push_back(name);
    });
    REQUIRE(h.ok());
    return *h;
  };
  auto b = submit('b');
  auto c = submit('c');
  c->SetGoal(GoalClass::kLatency, 0, std::nullopt);
  // Two more steps of the busy request: the change has been applied.
  REQUIRE((*busy)->Next(60000).has_value());
  REQUIRE((*busy)->Next(60000).has_value());
  (*busy)->Cancel();
  CHECK(b->Wait().finish_reason == "length");
  CHECK(c->Wait().finish_reason == "length");
  std::lock_guard<std::mutex> lock(mu);
  CHECK(first == std::vector<char>{'c', 'b'});  // FCFS among equals would be b, c
}

TEST_CASE("bad requests are refused with a clear error and the engine keeps serving") {
  if (!HaveModel()) return;
  auto engine = Engine::Open(Options(4096));
  REQUIRE(engine.ok());
  Engine& e = **engine;
  auto expect_error = [&](GenerationRequest g, const std::string& words) {
    auto h = e.Submit(g);
    REQUIRE_FALSE(h.ok());
    CAPTURE(h.status().message());
    CHECK(h.status().message().find(words) != std::string::npos);
  };
  GenerationRequest ok;
  ok.prompt = e.model()->TokenizeText("Hello");
  ok.sampling = SamplingParams::Greedy();
  ok.sampling.max_tokens = 8;

  GenerationRequest g = ok;
  g.prompt.clear();
  expect_error(g, "empty");
  g = ok;
  g.prompt.assign(3000, 42);
  expect_error(g, "context");
  g = ok;
  g.sampling.max_tokens = -1;
  expect_error(g, "max_tokens");
  g = ok;
  g.sampling.max_tokens = 100000;
  expect_error(g, "context");
  g = ok;
  g.sampling.top_p = 0;
  expect_error(g, "top_p");
  g = ok;
  g.sampling.temperature = -2;
  expect_error(g, "temperature");
  g = ok;
  g.prompt = {1, 2, 999999};
  expect_error(g, "vocabulary");

  auto h = e.Submit(ok);
  REQUIRE(h.ok());
  Completion c = (*h)->Wait();
  CHECK(c.finish_reason != "error");
  CHECK(!c.tokens.empty());
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

TEST_CASE("prompt log-probabilities score a continuation; a logits processor constrains output") {
  if (!HaveModel()) return;
  auto engine = Engine::Open(Options(4096));
  REQUIRE(engine.ok());
  Engine& e = **engine;
  Model& m = *e.model();
  std::vector<int32_t> prompt = m.TokenizeText("The capital of France is");
  std::vector<int32_t> good = m.TokenizeText(" Paris"), bad = m.TokenizeText(" banana");
  auto score = [&](const std::vector<int32_t>& choice) {
    GenerationRequest g;
    g.prompt = prompt;
    g.prompt.insert(g.prompt.end(), choice.begin(), choice.end());
    g.prompt_logprobs_from = static_cast<int>(prompt.size());
    g.sampling = SamplingParams::Greedy();
    g.sampling.max_tokens = 0;
    auto h = e.Submit(g);
    REQUIRE(h.ok());
    Completion c = (*h)->Wait();
    REQUIRE(c.prompt_logprobs.size() == choice.size());
    float sum = 0;
    for (float x : c.prompt_logprobs) sum += x;
    return std::make_pair(sum, c.prompt_logprobs);
  };
  auto [lp_good, per_token] = score(good);
  auto [lp_bad, unused] = score(bad);
  CHECK(lp_good > lp_bad);
  CHECK(lp_good < 0);

  // The same number from the model directly: log-softmax at the last prompt position.
  auto seq = m.NewSequence();
  std::vector<float> logits;
  REQUIRE(seq->Eval(prompt, &logits).ok());
  double z = 0, mx = *std::max_element(logits.begin(), logits.end());
  for (float l : logits) z += std::exp(l - mx);
  const double direct = logits[good[0]] - mx - std::log(z);
  CHECK(per_token[0] == doctest::Approx(direct).epsilon(0.02));

  // Only one token allowed: the output is that token repeated.
  GenerationRequest g;
  g.prompt = prompt;
  g.sampling.max_tokens = 5;
  g.sampling.temperature = 1.0f;
  const int32_t only = good[0];
  g.logits_processor = [only](std::span<const int32_t>, std::span<float> l) {
    for (size_t i = 0; i < l.size(); ++i)
      if (static_cast<int32_t>(i) != only) l[i] = -INFINITY;
  };
  auto h = e.Submit(g);
  REQUIRE(h.ok());
  Completion c = (*h)->Wait();
  CHECK(c.tokens == std::vector<int32_t>(5, only));
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

TEST_CASE("score_choices ranks continuations by total log-probability") {
  if (!HaveModel()) return;
  auto engine = Engine::Open(Options(4096));
  REQUIRE(engine.ok());
  Engine& e = **engine;
  Model& m = *e.model();
  GenerationRequest g;
  g.prompt = m.TokenizeRaw(
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nThe "
      "capital of France is");
  g.score_choices = {m.TokenizeText(" Paris."), m.TokenizeText(" a banana."),
                     m.TokenizeText(" Berlin.")};
  auto h = e.Submit(g);
  REQUIRE(h.ok());
  Completion c = (*h)->Wait();
  REQUIRE(c.choice_logprobs.size() == 3);
  CHECK(c.finish_reason == "stop");
  CHECK(c.choice_logprobs[0] > c.choice_logprobs[1]);
  CHECK(c.choice_logprobs[0] > c.choice_logprobs[2]);
  MESSAGE("Paris " << c.choice_logprobs[0] << ", banana " << c.choice_logprobs[1] << ", Berlin "
                   << c.choice_logprobs[2]);
  g.score_choices = {{}};
  CHECK_FALSE(e.Submit(g).ok());
}

TEST_CASE("stats carry each client's service, queue and fair-share counter") {
  if (!HaveModel()) return;
  EngineOptions o = Options(4096);
  o.policy = "vtc";
  o.fairness.client_weights["b"] = 2;
  auto engine = Engine::Open(o);
  REQUIRE(engine.ok());
  Engine& e = **engine;
  auto prompts = Prompts(*e.model(), 2);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const char* client : {"a", "b"}) {
    GenerationRequest g;
    g.prompt = prompts[client[0] == 'a' ? 0 : 1];
    g.sampling = SamplingParams::Greedy();
    g.sampling.max_tokens = 6;
    g.sampling.ignore_eos = true;
    g.client = client;
    auto h = e.Submit(std::move(g));
    REQUIRE(h.ok());
    hs.push_back(*h);
  }
  for (auto& h : hs) h->Wait();
  const EngineStats st = e.stats();
  REQUIRE(st.clients.size() == 2);
  for (const EngineStats::ClientStats& c : st.clients) {
    CAPTURE(c.client);
    const size_t prompt = prompts[c.client == "a" ? 0 : 1].size();
    CHECK(c.generated_tokens == 6);
    CHECK(c.prompt_tokens == prompt);
    CHECK(c.waiting == 0);
    CHECK(c.running == 0);
    // Service = 1 x prompt + 2 x generated, over the client's weight.
    CHECK(c.counter == doctest::Approx((prompt + 12.0) / (c.client == "b" ? 2 : 1)));
  }
}

TEST_CASE("stats count the decode-only steps apart from those that compute prompt tokens") {
  if (!HaveModel()) return;
  auto engine = Engine::Open(Options(4096));
  REQUIRE(engine.ok());
  Engine& e = **engine;
  // A prompt of one step's chunk at most, then five tokens by decode alone.
  const std::vector<int32_t> prompt = Prompts(*e.model(), 1)[0];
  REQUIRE(prompt.size() < 64);
  SubmitGreedy(e, {prompt}, 6)[0]->Wait();
  const EngineStats st = e.stats();
  CHECK(st.steps == 6);
  CHECK(st.decode_steps == 5);
  CHECK(st.decode_step_tokens == 5);
  // The decodes attend positions [0, P + 1), ..., [0, P + 5).
  CHECK(st.decode_step_context_tokens == 5 * prompt.size() + 15);
  CHECK(st.decode_step_seconds > 0);
  CHECK(st.decode_step_seconds < st.forward_seconds);
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

TEST_CASE("min_tokens: stop strings and stop tokens end a request only after it") {
  if (!HaveModel()) return;
  auto engine = Engine::Open(Options(4096));
  REQUIRE(engine.ok());
  Engine& e = **engine;
  Model& m = *e.model();
  const std::vector<int32_t> prompt = m.TokenizeText("The list of colours:\n1.");
  // The greedy first token, and its text as a stop string.
  const std::vector<int32_t> plain = Alone(m, prompt, 6);
  REQUIRE(plain.size() == 6);
  const std::string first = m.TokenBytes(plain[0]);
  REQUIRE(!first.empty());
  for (bool serving : {true, false}) {
    CAPTURE(serving);
    auto run = [&](SamplingParams sp) {
      if (!serving) {
        auto r = Generate(m, prompt, sp);
        REQUIRE(r.ok());
        return std::make_pair(r->tokens, r->text);
      }
      GenerationRequest g;
      g.prompt = prompt;
      g.sampling = sp;
      auto h = e.Submit(g);
      REQUIRE(h.ok());
      Completion c = (*h)->Wait();
      return std::make_pair(c.tokens, c.text);
    };
    SamplingParams sp = SamplingParams::Greedy();
    sp.max_tokens = 6;
    sp.ignore_eos = true;
    sp.stop = {first};
    auto [tokens, text] = run(sp);
    CHECK(text.empty());  // the stop string at the first token
    sp.min_tokens = 1;
    std::tie(tokens, text) = run(sp);
    CHECK(text.rfind(first, 0) == 0);  // now it starts the output
    CHECK(!tokens.empty());
    CHECK(tokens[0] == plain[0]);
    // A stop token is masked until min_tokens: the first token differs.
    sp.stop.clear();
    sp.min_tokens = 0;
    sp.stop_tokens = {plain[0]};
    std::tie(tokens, text) = run(sp);
    CHECK(tokens.empty());
    sp.min_tokens = 2;
    std::tie(tokens, text) = run(sp);
    REQUIRE(tokens.size() >= 2);
    CHECK(tokens[0] != plain[0]);
  }
  SamplingParams bad;
  bad.max_tokens = 4;
  bad.min_tokens = 5;
  CHECK(bad.Validate().message() == "min_tokens must be in [0, max_tokens], got 5");
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

// 64 requests in waves over 8 long shared prefixes, on a pool that holds
// about two of them: each wave evicts the prefixes the next one reads.
std::vector<std::vector<int32_t>> TieredWorkload(Model& m) {
  std::vector<std::vector<int32_t>> prefixes;
  const auto base = Prompts(m, 8);
  for (int f = 0; f < 8; ++f) {
    std::vector<int32_t> p;
    while (p.size() < 96)
      p.insert(p.end(), base[(f + p.size()) % 8].begin(), base[(f + p.size()) % 8].end());
    p.resize(96);
    p[0] = base[f][0];
    prefixes.push_back(std::move(p));
  }
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 64; ++i) {
    std::vector<int32_t> q = prefixes[(i * 3) % 8];
    const auto tail = m.TokenizeRaw(" Question " + std::to_string(i) + ":");
    q.insert(q.end(), tail.begin(), tail.end());
    out.push_back(std::move(q));
  }
  return out;
}

std::vector<std::vector<int32_t>> RunWaves(Engine& e,
                                           const std::vector<std::vector<int32_t>>& all) {
  std::vector<std::vector<int32_t>> out;
  for (size_t at = 0; at < all.size(); at += 4) {
    std::vector<std::vector<int32_t>> wave(all.begin() + static_cast<long>(at),
                                           all.begin() + static_cast<long>(at + 4));
    for (auto& h : SubmitGreedy(e, wave, 6)) out.push_back(h->Wait().tokens);
  }
  return out;
}

TEST_CASE("the host KV tier changes no greedy output and serves evicted prefixes") {
  if (!HaveModel()) return;
  std::vector<std::vector<int32_t>> reference;
  uint64_t cached_without = 0;
  for (const bool tier : {false, true}) {
    CAPTURE(tier);
    EngineOptions o = Options(16 * 16);  // 16 blocks: two prefixes and their questions
    // The q8 cache's row scales travel with their blocks.
    if (!o.model.cpu.exact) o.model.cpu.kv_cache = CpuOptions::KvCache::kQ8;
    o.kv_growth_reserve = 0;
    o.kv_host_bytes = tier ? int64_t{64} << 20 : 0;
    auto engine = Engine::Open(o);
    REQUIRE_MESSAGE(engine.ok(), engine.status().ToString());
    Engine& e = **engine;
    const auto prompts = TieredWorkload(*e.model());
    std::vector<std::vector<int32_t>> got = RunWaves(e, prompts);
    const EngineStats s = e.stats();
    MESSAGE(std::string(tier ? "tier on: " : "tier off: ")
            << s.cached_prompt_tokens << " device-cached, " << s.host_prompt_tokens
            << " host-cached prompt tokens; " << s.host_blocks_out << " blocks out, "
            << s.host_blocks_in << " in");
    if (!tier) {
      reference = got;
      cached_without = s.cached_prompt_tokens;
      CHECK(s.kv_host_blocks_total == 0);
      continue;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i] == reference[i]);
    }
    CHECK(s.host_blocks_out > 0);
    CHECK(s.host_blocks_in > 0);
    CHECK(s.host_prompt_tokens > 0);
    CHECK(s.cached_prompt_tokens + s.host_prompt_tokens > cached_without);
    CHECK(s.host_bytes_in == s.host_blocks_in * (s.kv_host_bytes / s.kv_host_blocks_total));
    CHECK(s.host_copy_failures == 0);
    CHECK(s.kv_blocks_free + s.kv_blocks_cached == s.kv_blocks_total);

    // A prefix the last waves evicted comes back ahead of its request
    // (Engine::Prefetch), and the request then finds it on the device.
    const std::vector<int32_t>& early = prompts[0];
    const int device_before = e.ProbePrefix(early, 0);
    const int brought = e.Prefetch(early, 0);
    CHECK(brought > 0);
    std::vector<std::shared_ptr<RequestHandle>> again = SubmitGreedy(e, {early}, 6);
    CHECK(again[0]->Wait().tokens == reference[0]);
    const EngineStats p = e.stats();
    // What the prefetch brought (free blocks allow) is not copied again.
    CHECK(static_cast<int>(p.host_prompt_tokens - s.host_prompt_tokens) + device_before + brought <=
          static_cast<int>(early.size()));
    CHECK(p.cached_prompt_tokens - s.cached_prompt_tokens >=
          static_cast<uint64_t>(device_before + brought));
    CHECK(p.host_in_hidden_seconds > 0);  // no step waited for it
  }
  // The first request of each prefix alone, as the reference of both.
  EngineOptions alone = Options(4096);
  if (!alone.model.cpu.exact) alone.model.cpu.kv_cache = CpuOptions::KvCache::kQ8;
  auto engine = Engine::Open(alone);
  REQUIRE(engine.ok());
  const auto prompts = TieredWorkload(*(*engine)->model());
  for (size_t i = 0; i < 8; ++i) CHECK(reference[i] == Alone(*(*engine)->model(), prompts[i], 6));
}

}  // namespace
}  // namespace braid
