// End to end on the bundled model (BRAID_MODEL_PATH): a map-reduce of four
// summaries joined into a final call, in DAG and in baseline mode, and a
// failing node. Short generations, one thread: seconds.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include "runtime/runtime.h"

using namespace braid;
using namespace braid::rt;

namespace {

std::unique_ptr<Engine> OpenEngine(int max_batch_tokens = 256) {
  if (!std::filesystem::exists(BRAID_MODEL_PATH)) return nullptr;
  EngineOptions o;
  o.model.path = BRAID_MODEL_PATH;
  o.model.threads = 1;
  o.kv_tokens = 4096;
  o.max_batch_tokens = max_batch_tokens;
  auto e = Engine::Open(o);
  REQUIRE_MESSAGE(e.ok(), e.status().message());
  return std::move(e).value();
}

VarState WaitFor(Run& run, VarId v, int timeout_ms = 120000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (run.state(v) == VarState::kPending && std::chrono::steady_clock::now() < end)
    run.WaitAny({v}, 200);
  return run.state(v);
}

const char* kChunks[] = {
    "The city council approved a new park on the river bank after a long debate about costs.",
    "Local farmers report a record apple harvest thanks to a warm spring and little rain.",
    "The library will stay open until midnight during exam weeks, starting next month.",
    "A new bus line connects the university with the train station every ten minutes.",
};

struct MapReduce {
  std::vector<VarId> summaries;
  VarId joined = 0, final = 0, unwanted = 0;
};

MapReduce Build(Run& run) {
  auto sum = SemanticFunction::Parse({"summarize", "You summarize news in a few words.",
                                      "Summarize: {{chunk}}{{gen summary max_tokens=12}}"});
  auto fin = SemanticFunction::Parse(
      {"headline", "You write headlines.",
       "News:\n{{all}}\nWrite one headline.{{gen headline max_tokens=16}}"});
  REQUIRE(sum.ok());
  REQUIRE(fin.ok());
  MapReduce m;
  std::vector<Arg> parts;
  for (int i = 0; i < 4; ++i) {
    auto o = run.Call(**sum, {{"chunk", Arg::Text(kChunks[i])}}, {"main", i});
    REQUIRE(o.ok());
    m.summaries.push_back(o->at("summary"));
    parts.push_back(Arg::Var(o->at("summary")));
  }
  auto j = run.Join(parts, "\n");
  REQUIRE(j.ok());
  m.joined = *j;
  auto f = run.Call(**fin, {{"all", Arg::Var(m.joined)}}, {"main", 4});
  REQUIRE(f.ok());
  m.final = f->at("headline");
  // A lazy function's call runs only once wanted (an eager one would start now).
  auto later = SemanticFunction::Parse({"summarize_later", "You summarize news in a few words.",
                                        "Summarize: {{chunk}}{{gen summary max_tokens=12}}", true});
  REQUIRE(later.ok());
  auto u = run.Call(**later, {{"chunk", Arg::Text("Nobody asks for this summary.")}}, {"main", 5});
  REQUIRE(u.ok());
  m.unwanted = u->at("summary");
  return m;
}

}  // namespace

// One call of `fn` (no inputs) in a fresh run on the bundled model, its
// output `out` wanted. `engine` is null when the model is missing.
struct OneCall {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Runtime> rt;
  std::shared_ptr<Run> run;
  VarId out = 0;
};

OneCall StartOneCall(const FunctionSpec& spec, const std::string& out) {
  OneCall c;
  c.engine = OpenEngine();
  if (!c.engine) return c;
  RuntimeOptions ro;
  ro.engines = {c.engine.get()};
  auto rt = Runtime::Open(ro);
  REQUIRE(rt.ok());
  c.rt = std::move(rt).value();
  auto run = c.rt->StartRun({});
  REQUIRE(run.ok());
  c.run = *run;
  auto fn = SemanticFunction::Parse(spec);
  REQUIRE(fn.ok());
  auto o = c.run->Call(**fn, {}, {"main", 0});
  REQUIRE(o.ok());
  c.out = o->at(out);
  REQUIRE(c.run->Want(c.out, {}).ok());
  return c;
}

TEST_CASE("e2e: map-reduce in DAG mode with a latency want") {
  auto engine = OpenEngine();
  if (!engine) {
    MESSAGE("skipped: no model at " BRAID_MODEL_PATH);
    return;
  }
  RuntimeOptions ro;
  ro.engines = {engine.get()};
  auto rt = Runtime::Open(ro);
  REQUIRE(rt.ok());
  auto run = (*rt)->StartRun({});
  REQUIRE(run.ok());
  MapReduce m = Build(**run);
  GetOptions get;
  get.criteria = Criteria::kLatency;
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE((*run)->Want(m.final, get).ok());
  REQUIRE(WaitFor(**run, m.final) == VarState::kReady);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (VarId s : m.summaries) CHECK(!(*run)->value(s).empty());
  CHECK(!(*run)->value(m.final).empty());
  CHECK((*run)->state(m.unwanted) == VarState::kPending);
  int done = 0, cached = 0;
  for (const auto& n : (*run)->Nodes()) {
    if (n.wanted) {
      CHECK(n.state == NodeState::kDone);
      CHECK(n.goal == Criteria::kLatency);
      ++done;
    } else {
      CHECK(n.state == NodeState::kWaiting);
    }
    if (n.label == "summarize") cached += n.cached_tokens;
  }
  CHECK(done == 6);
  // The summaries share only a short template prefix (< 64 tokens), so they
  // go to the engine together rather than behind a leader (co-scheduling is
  // tested with a fake engine in runtime_test.cpp); whether a later one still
  // finds an earlier one's prefix cached depends on timing.
  MESSAGE("summaries' cached prompt tokens: " << cached);
  MESSAGE("dag mode: " << ms << " ms; headline: " << (*run)->value(m.final));
  MESSAGE((*run)->ToDot());
  (*run)->Finish(Status::Ok());
}

TEST_CASE("e2e: a long shared prefix is computed once, however the sharers arrive (20 runs)") {
  // Small steps: the prefix takes several steps of chunked prefill, a wide
  // window for a second sharer to start computing it too.
  auto engine = OpenEngine(/*max_batch_tokens=*/24);
  if (!engine) {
    MESSAGE("skipped: no model at " BRAID_MODEL_PATH);
    return;
  }
  RuntimeOptions ro;
  ro.engines = {engine.get()};
  auto rt = Runtime::Open(ro);
  REQUIRE(rt.ok());
  std::mt19937 rng(7);
  for (int rep = 0; rep < 20; ++rep) {
    CAPTURE(rep);
    // A fresh system prompt each time (nothing cached from the last rep),
    // well over the 64 tokens from which sharers are co-scheduled.
    std::string system = "Run " + std::to_string(rep) + ". You are a careful assistant.";
    for (int i = 0; i < 6; ++i)
      system += " Answer briefly, in plain words, and never repeat the question.";
    auto fn =
        SemanticFunction::Parse({"agent", system, "Task: {{task}}{{gen answer max_tokens=2}}"});
    REQUIRE(fn.ok());
    auto run = (*rt)->StartRun({});
    REQUIRE(run.ok());
    // The two sharers become ready 0-3 ms apart: in one dispatcher pass or
    // in two, the second one finds the first one's prefix in flight.
    auto a = (*run)->Call(**fn, {{"task", Arg::Text("name a colour")}}, {"main", 0});
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    auto b = (*run)->Call(**fn, {{"task", Arg::Text("name a fruit")}}, {"main", 1});
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(WaitFor(**run, a->at("answer")) == VarState::kReady);
    REQUIRE(WaitFor(**run, b->at("answer")) == VarState::kReady);
    auto nodes = (*run)->Nodes();
    REQUIRE(nodes.size() == 2);
    const int shared = nodes[0].prompt_tokens - 8;  // all but the differing task text
    const int computed = nodes[0].prompt_tokens - nodes[0].cached_tokens + nodes[1].prompt_tokens -
                         nodes[1].cached_tokens;
    CHECK(nodes[0].cached_tokens + nodes[1].cached_tokens >= shared - 16);
    CHECK(computed <= nodes[0].prompt_tokens + 24);
    (*run)->Finish(Status::Ok());
  }
}

TEST_CASE("e2e: baseline mode gives the same kind of output") {
  auto engine = OpenEngine();
  if (!engine) {
    MESSAGE("skipped: no model at " BRAID_MODEL_PATH);
    return;
  }
  RuntimeOptions ro;
  ro.engines = {engine.get()};
  auto rt = Runtime::Open(ro);
  REQUIRE(rt.ok());
  RunOptions opts;
  opts.mode = Mode::kBaseline;
  opts.rtt_ms = 10;
  auto run = (*rt)->StartRun(opts);
  REQUIRE(run.ok());
  MapReduce m = Build(**run);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE((*run)->Want(m.final, {}).ok());
  REQUIRE(WaitFor(**run, m.final) == VarState::kReady);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (VarId s : m.summaries) CHECK(!(*run)->value(s).empty());
  CHECK(!(*run)->value(m.final).empty());
  CHECK((*run)->state(m.unwanted) == VarState::kPending);
  for (const auto& n : (*run)->Nodes()) {
    CHECK(n.group == 0);
    CHECK(n.priority == 0);
  }
  MESSAGE("baseline mode (rtt 10 ms): " << ms << " ms; headline: " << (*run)->value(m.final));
}

TEST_CASE("e2e: a failing call propagates; independent branches finish") {
  auto engine = OpenEngine();
  if (!engine) {
    MESSAGE("skipped: no model at " BRAID_MODEL_PATH);
    return;
  }
  RuntimeOptions ro;
  ro.engines = {engine.get()};
  auto rt = Runtime::Open(ro);
  REQUIRE(rt.ok());
  auto run = (*rt)->StartRun({});
  REQUIRE(run.ok());
  // max_tokens beyond the context: the engine refuses the request.
  auto bad = SemanticFunction::Parse(
      {"too_long", "", "Tell a story: {{x}}{{gen story max_tokens=100000}}"});
  auto ok = SemanticFunction::Parse({"short", "", "Say hi to {{x}}:{{gen hi max_tokens=8}}"});
  REQUIRE(bad.ok());
  REQUIRE(ok.ok());
  auto b = (*run)->Call(**bad, {{"x", Arg::Text("cats")}}, {"main", 0});
  auto after = (*run)->Call(**ok, {{"x", Arg::Var(b->at("story"))}}, {"main", 1});
  auto side = (*run)->Call(**ok, {{"x", Arg::Text("Bob")}}, {"main", 2});
  auto j = (*run)->Join({Arg::Var(after->at("hi")), Arg::Var(side->at("hi"))}, " ");
  REQUIRE((*run)->Want(*j, {}).ok());
  REQUIRE(WaitFor(**run, *j) == VarState::kFailed);
  REQUIRE(WaitFor(**run, side->at("hi")) == VarState::kReady);
  const std::string err = (*run)->error(after->at("hi"));
  CHECK(err.rfind("node too_long#1 failed: ", 0) == 0);
  CHECK(err.find("context") != std::string::npos);
  CHECK((*run)->error(*j) == err);
  MESSAGE("propagated error: " << err);
}

TEST_CASE("e2e: a regex output is constrained to its pattern") {
  OneCall c = StartOneCall({"year", "You answer with a year.",
                            "When did the first person walk on the moon? {{regex y "
                            "pattern=\"(19|20)[0-9]{2}\" max_tokens=8}}"},
                           "y");
  if (!c.engine) {
    MESSAGE("skipped: no model at " BRAID_MODEL_PATH);
    return;
  }
  const VarState s = WaitFor(*c.run, c.out);
  REQUIRE_MESSAGE(s == VarState::kReady, c.run->error(c.out));
  const std::string y = c.run->value(c.out);
  CHECK(y.size() == 4);
  CHECK((y.rfind("19", 0) == 0 || y.rfind("20", 0) == 0));
  MESSAGE("regex output: " << y);
}

TEST_CASE("e2e: a running node reports the tokens streamed so far") {
  OneCall c = StartOneCall({"story", "You tell long stories.",
                            "Tell a long story about a lighthouse.{{gen story max_tokens=96}}"},
                           "story");
  if (!c.engine) {
    MESSAGE("skipped: no model at " BRAID_MODEL_PATH);
    return;
  }
  const VarId story = c.out;
  // Poll while it runs: a count strictly between 0 and the final one shows up.
  int seen_running = 0;
  double last_ms = 0;
  while (c.run->state(story) == VarState::kPending) {
    for (const NodeInfo& n : c.run->Nodes()) {
      if (n.state != NodeState::kRunning || n.generated_tokens == 0) continue;
      seen_running = std::max(seen_running, n.generated_tokens);
      CHECK(n.run_ms >= last_ms);  // live time grows
      last_ms = n.run_ms;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(c.run->state(story) == VarState::kReady);
  const int final_tokens = c.run->Nodes().front().generated_tokens;
  CHECK(seen_running > 0);
  CHECK(seen_running < final_tokens + 1);
  MESSAGE("live count seen " << seen_running << " of " << final_tokens << " tokens");
}

TEST_CASE("e2e: select: the space where prompt and choice meet is tokenized as one text") {
  auto scores_of = [](const std::string& tmpl) -> std::optional<ChoiceScores> {
    OneCall c = StartOneCall({"act", "", tmpl}, "a");
    if (!c.engine) return std::nullopt;
    const VarState s = WaitFor(*c.run, c.out);
    REQUIRE_MESSAGE(s == VarState::kReady, c.run->error(c.out));
    auto scores = c.run->scores(c.out);
    REQUIRE(scores.ok());
    return *scores;
  };
  const std::string q = "Question: what is 17 times 23?\nTool to use (calculator or search).\n";
  auto spaced =
      scores_of(q + "Action: {{select a choices=[\"calculator\", \"search\"] scoring=\"sum\"}}");
  if (!spaced) {
    MESSAGE("skipped: no model at " BRAID_MODEL_PATH);
    return;
  }
  auto joined =
      scores_of(q + "Action:{{select a choices=[\" calculator\", \" search\"] scoring=\"sum\"}}");
  REQUIRE(joined);
  for (size_t i = 0; i < 2; ++i) {
    CHECK((*spaced)[i].second == doctest::Approx((*joined)[i].second).epsilon(0.01));
    MESSAGE((*spaced)[i].first << ": " << (*spaced)[i].second << " / " << (*joined)[i].second);
  }
  // Per token, a mean is never below the sum of negative log-probabilities;
  // the unconditional scoring runs a second pass and gives finite scores.
  auto mean = scores_of(q + "Action: {{select a choices=[\"calculator\", \"search\"]}}");
  auto uncond = scores_of(
      q + "Action: {{select a choices=[\"calculator\", \"search\"] scoring=\"unconditional\"}}");
  REQUIRE(mean);
  REQUIRE(uncond);
  for (size_t i = 0; i < 2; ++i) {
    CHECK((*mean)[i].second >= (*spaced)[i].second - 1e-6);
    CHECK(std::isfinite((*uncond)[i].second));
  }
}

// An agent-like loop of three turns, each extending the last turn's prompt
// and output: with contexts kept (held and expected, on an engine that
// evicts by next use and admits against thrashing) the greedy outputs are
// those of the plain engine and runtime, and the later turns find their
// context cached.
TEST_CASE("e2e: kept contexts change no output; later turns hit the cache") {
  auto loop = [](bool keep, std::vector<int>* cached) {
    if (!std::filesystem::exists(BRAID_MODEL_PATH)) return std::vector<std::string>{};
    EngineOptions o;
    o.model.path = BRAID_MODEL_PATH;
    o.model.threads = 1;
    o.kv_tokens = 4096;
    o.evict = keep ? "next-use" : "lru";
    o.anti_thrash = keep;
    auto e = Engine::Open(o);
    REQUIRE_MESSAGE(e.ok(), e.status().message());
    RuntimeOptions ro;
    ro.engines = {e->get()};
    ro.retention.pin = keep;
    ro.retention.expect = keep;
    auto rt = Runtime::Open(ro);
    REQUIRE(rt.ok());
    auto run = (*rt)->StartRun({});
    REQUIRE(run.ok());
    auto fn = SemanticFunction::Parse(
        {"turn", "You answer with one short step.", "{{t}}\nStep: {{gen s max_tokens=8}}"});
    REQUIRE(fn.ok());
    std::string transcript = "Task: plan a picnic by the river.";
    std::vector<std::string> outputs;
    for (int i = 0; i < 3; ++i) {
      auto out = (*run)->Call(**fn, {{"t", Arg::Text(transcript)}}, {"main", i});
      REQUIRE(out.ok());
      REQUIRE(WaitFor(**run, out->at("s")) == VarState::kReady);
      outputs.push_back((*run)->value(out->at("s")));
      transcript += "\nStep: " + outputs.back() + "\nObservation: done.";
    }
    for (const NodeInfo& n : (*run)->Nodes()) cached->push_back(n.cached_tokens);
    (*run)->Finish(Status::Ok());
    return outputs;
  };
  std::vector<int> plain_cached, kept_cached;
  const auto plain = loop(false, &plain_cached);
  const auto kept = loop(true, &kept_cached);
  CHECK(plain == kept);
  REQUIRE(kept_cached.size() == 3);
  CHECK(kept_cached[1] > 0);
  CHECK(kept_cached[2] > kept_cached[1]);
}
