// The remote engine against a fake OpenAI-compatible server on loopback:
// streaming, the request body, retries, failures after text, timeouts,
// cancellation, refused features, liveness and prefix memory; and the wire
// format's pieces on their own.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "engine/open.h"
#include "remote/fake_openai_server.h"
#include "remote/openai_stream.h"
#include "remote/prefix_memory.h"

using namespace braid;
using braid::remote::testing::FakeOpenAiServer;
using Reply = FakeOpenAiServer::Reply;

namespace {

std::unique_ptr<Engine> Open(const std::string& url, RemoteEngineOptions o = {}) {
  o.url = url;
  if (o.model.empty()) o.model = "smollm2";
  o.backoff_ms = 5;
  auto e = OpenRemoteEngine(o);
  REQUIRE_MESSAGE(e.ok(), e.status().message());
  return std::move(e).value();
}

GenerationRequest Prompt(std::vector<int32_t> ids = {1, 2, 3, 4, 5}) {
  GenerationRequest r;
  r.prompt = std::move(ids);
  r.sampling.max_tokens = 7;
  r.sampling.temperature = 0.5f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 1234;
  r.sampling.stop = {"\n\n"};
  return r;
}

Reply Stalling(int after) {
  Reply r = FakeOpenAiServer::Hello();
  r.stall_after = after;
  return r;
}

// Polls pred until it holds; the deadline only catches a hang, so it is far
// beyond anything a slow or loaded machine needs.
template <typename Pred>
bool Eventually(Pred pred, int ms = 60000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

TEST_CASE("remote: deltas stream in order; text, usage and the request body are right") {
  FakeOpenAiServer server;
  REQUIRE(server.ok());
  RemoteEngineOptions o;
  o.api_key = "sk-test";
  auto engine = Open(server.url() + "/v1/", o);
  CHECK(engine->model() == nullptr);
  CHECK(engine->alive());
  std::vector<std::string> seen;  // by the callback, in order
  std::mutex mu;
  GenerationRequest req = Prompt();
  req.top_logprobs = 2;
  auto h = engine->Submit(req, [&](const Delta& d) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(d.finished ? "<" + d.finish_reason + ">" : d.text);
  });
  REQUIRE_MESSAGE(h.ok(), h.status().message());
  std::vector<std::string> pulled;
  while (auto d = (*h)->Next(60000)) {
    CHECK(d->tokens.empty());  // a completions stream carries text only
    pulled.push_back(d->finished ? "<" + d->finish_reason + ">" : d->text);
  }
  const std::vector<std::string> expected = {"Hel", "lo", "!", "<stop>"};
  CHECK(pulled == expected);
  const Completion c = (*h)->Wait();
  CHECK(c.text == "Hello!");
  CHECK(c.finish_reason == "stop");
  CHECK(c.error.empty());
  CHECK(c.usage.prompt_tokens == 5);
  CHECK(c.usage.cached_tokens == 2);
  CHECK(c.usage.generated_tokens == 3);
  CHECK(c.timings.inter_token_ms.size() == 2);
  // The callback runs just after the delta is queued for Next.
  CHECK(Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size() == expected.size();
  }));
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(seen == expected);
  }

  auto reqs = server.requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].method == "POST");
  CHECK(reqs[0].target == "/v1/completions");
  CHECK(reqs[0].headers.find("Authorization: Bearer sk-test") != std::string::npos);
  const auto body = nlohmann::json::parse(reqs[0].body);
  CHECK(body["model"] == "smollm2");
  CHECK(body["prompt"] == std::vector<int>{1, 2, 3, 4, 5});
  CHECK(body["max_tokens"] == 7);
  CHECK(body["temperature"].get<double>() == doctest::Approx(0.5));
  CHECK(body["top_p"].get<double>() == doctest::Approx(0.9));
  CHECK(body["seed"] == 1234);
  CHECK(body["stop"] == std::vector<std::string>{"\n\n"});
  CHECK(body["stream"] == true);
  CHECK(body["stream_options"]["include_usage"] == true);
  CHECK(body["logprobs"] == 2);

  const EngineStats s = engine->stats();
  CHECK(s.running == 0);
  CHECK(s.waiting == 0);
  CHECK(s.requests_finished == 1);
  CHECK(s.generated_tokens == 3);
  CHECK(s.kv_blocks_total == 0);
}

TEST_CASE("remote: 503s and drops before any text are retried; a 400 is not") {
  FakeOpenAiServer server;
  auto engine = Open(server.url());
  Reply busy;
  busy.kind = Reply::Kind::kStatus;
  server.Push(busy);
  server.Push(busy);
  Reply drop;
  drop.kind = Reply::Kind::kDrop;
  server.Push(drop);
  server.Push(FakeOpenAiServer::Hello());
  auto h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  Completion c = (*h)->Wait();
  CHECK_MESSAGE(c.finish_reason == "stop", c.error);
  CHECK(c.text == "Hello!");
  CHECK(server.completions() == 4);

  Reply bad;
  bad.kind = Reply::Kind::kStatus;
  bad.status = 400;
  bad.body = R"({"error": {"message": "prompt is too long"}})";
  server.Push(bad);
  h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  c = (*h)->Wait();
  CHECK(c.finish_reason == "error");
  CHECK(c.error.find("HTTP 400: prompt is too long") != std::string::npos);
  CHECK(c.error.find(server.url()) != std::string::npos);
  CHECK(server.completions() == 5);

  // Retries run out: the last failure is reported, with the attempts.
  RemoteEngineOptions o;
  o.max_retries = 1;
  auto once = Open(server.url(), o);
  server.Push(busy);
  server.Push(busy);
  h = once->Submit(Prompt());
  REQUIRE(h.ok());
  c = (*h)->Wait();
  CHECK(c.finish_reason == "error");
  CHECK(c.error.find("HTTP 503: busy (after 2 attempts)") != std::string::npos);
  CHECK(server.completions() == 7);
}

TEST_CASE("remote: a failure after text was delivered finishes with an error, not a retry") {
  FakeOpenAiServer server;
  auto engine = Open(server.url());
  Reply r = FakeOpenAiServer::Hello();
  r.drop_after = 1;
  server.Push(r);
  auto h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  const Completion c = (*h)->Wait();
  CHECK(c.text == "Hel");
  CHECK(c.finish_reason == "error");
  CHECK(c.error.find("remote engine " + server.url()) == 0);
  CHECK(c.error.find("closed") != std::string::npos);
  CHECK(server.completions() == 1);

  CHECK(engine->alive());  // /health still answers: the server is up

  // A broken stream and a /health that fails: the engine is down at once.
  RemoteEngineOptions o;
  o.health_interval_ms = 30;
  auto watched = Open(server.url(), o);
  server.Push(r);
  server.health_status = 503;
  h = watched->Submit(Prompt());
  REQUIRE(h.ok());
  CHECK((*h)->Wait().finish_reason == "error");
  CHECK_FALSE(watched->alive());
  server.health_status = 200;
  CHECK(Eventually([&] { return watched->alive(); }));

  // A stream connected before the outage and ending well after it does not
  // bring the engine back: only /health answering does.
  Reply slow = FakeOpenAiServer::Hello();
  slow.events.insert(slow.events.begin() + 1, 60,
                     R"({"choices":[{"index":0,"text":"-","finish_reason":null}]})");
  server.Push(slow);
  auto long_run = watched->Submit(Prompt());
  REQUIRE(long_run.ok());
  REQUIRE(Eventually([&] { return server.completions() == 3; }));
  server.Push(r);
  server.health_status = 503;
  h = watched->Submit(Prompt());
  REQUIRE(h.ok());
  CHECK((*h)->Wait().finish_reason == "error");
  CHECK_FALSE(watched->alive());
  CHECK((*long_run)->Wait().finish_reason == "stop");
  CHECK_FALSE(watched->alive());
  server.health_status = 200;
  CHECK(Eventually([&] { return watched->alive(); }));

  server.Push(Reply{Reply::Kind::kStream, {R"({"error": {"message": "out of memory"}})"}});
  h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  CHECK((*h)->Wait().error.find("the server reported: out of memory") != std::string::npos);
}

TEST_CASE("remote: a stalled stream ends at the idle or first-token timeout") {
  FakeOpenAiServer server;
  // Each engine has one short timeout, the one under test; the other stays at
  // its minute-long default, so a slow first chunk cannot end the idle case.
  RemoteEngineOptions idle;
  idle.idle_timeout_ms = 150;
  auto engine = Open(server.url(), idle);
  server.Push(Stalling(1));
  auto h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  Completion c = (*h)->Wait();
  CHECK(c.text == "Hel");
  CHECK(c.finish_reason == "error");
  CHECK(c.error.find("idle_timeout_ms") != std::string::npos);

  RemoteEngineOptions first;
  first.first_token_timeout_ms = 300;
  engine = Open(server.url(), first);
  server.Push(Stalling(0));
  h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  c = (*h)->Wait();
  CHECK(c.text.empty());
  CHECK(c.finish_reason == "error");
  CHECK(c.error.find("first_token_timeout_ms") != std::string::npos);
  CHECK(server.completions() == 2);  // a timeout is not retried
  CHECK(Eventually([&] { return server.saw_client_close(); }));
}

TEST_CASE("remote: Cancel closes the connection and finishes with 'cancelled'") {
  FakeOpenAiServer server;
  auto engine = Open(server.url());
  server.Push(Stalling(1));
  auto h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  auto first = (*h)->Next(60000);
  REQUIRE(first.has_value());
  CHECK(first->text == "Hel");
  CHECK(engine->stats().running == 1);
  (*h)->Cancel();
  const Completion c = (*h)->Wait();
  CHECK(c.finish_reason == "cancelled");
  CHECK(Eventually([&] { return server.saw_client_close(); }));
  CHECK(engine->stats().running == 0);
  CHECK(engine->stats().requests_cancelled == 1);
}

TEST_CASE("remote: Shutdown cancels what is in flight; max_in_flight bounds Submit") {
  FakeOpenAiServer server;
  RemoteEngineOptions o;
  o.max_in_flight = 1;
  auto engine = Open(server.url(), o);
  server.Push(Stalling(1));
  auto h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  auto second = engine->Submit(Prompt());
  CHECK(second.status().code() == StatusCode::kResourceExhausted);
  CHECK(second.status().message().find("max_in_flight") != std::string::npos);
  engine->Shutdown();
  CHECK((*h)->finished());
  CHECK((*h)->Wait().finish_reason == "cancelled");
  CHECK(engine->Submit(Prompt()).status().code() == StatusCode::kCancelled);
}

TEST_CASE("remote: what an OpenAI server cannot do is refused, naming the feature") {
  FakeOpenAiServer server;
  auto engine = Open(server.url());
  GenerationRequest r = Prompt();
  r.score_choices = {{1}, {2}};
  auto s = engine->Submit(r).status();
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("score_choices") != std::string::npos);
  r = Prompt();
  r.prompt_logprobs_from = 0;
  s = engine->Submit(r).status();
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("prompt_logprobs_from") != std::string::npos);
  r = Prompt();
  r.logits_processor = [](std::span<const int32_t>, std::span<float>) {};
  s = engine->Submit(r).status();
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("logits_processor") != std::string::npos);
  CHECK(engine->Submit(Prompt({})).status().code() == StatusCode::kInvalidArgument);
  CHECK(server.completions() == 0);

  RemoteEngineOptions o;
  o.url = "https://example.com:443";
  CHECK(OpenRemoteEngine(o).status().code() == StatusCode::kUnsupported);
  CHECK(OpenRemoteEngine(o).status().message().find("https") != std::string::npos);
  for (const char* bad : {"ftp://x", "http://", "http://h:0", "http://h:99999", "http://h:x",
                          "http://u@h:1", "http://[::1"}) {
    o.url = bad;
    CAPTURE(bad);
    CHECK(OpenRemoteEngine(o).status().code() == StatusCode::kInvalidArgument);
  }
  o.url = "http://[::1]:8080/v1";
  CHECK(OpenRemoteEngine(o).ok());
  o.url = "http://127.0.0.1:8080";
  o.max_in_flight = 0;
  CHECK(OpenRemoteEngine(o).status().message().find("max_in_flight") != std::string::npos);
}

TEST_CASE("remote: not alive after repeated connection failures, alive once /health answers") {
  uint16_t port = 0;
  {
    FakeOpenAiServer probe;  // a free port, closed again at once
    port = probe.port();
  }
  RemoteEngineOptions o;
  o.health_interval_ms = 30;
  o.max_retries = 5;
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto engine = Open(url, o);
  auto h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  const Completion c = (*h)->Wait();
  CHECK(c.finish_reason == "error");
  CHECK(c.error.find("cannot connect") != std::string::npos);
  // Three failures in a row took it down; it stopped retrying then.
  CHECK(c.error.find("(after 3 attempts)") != std::string::npos);
  CHECK_FALSE(engine->alive());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(engine->alive());  // probes fail while nobody listens

  FakeOpenAiServer server(port);
  REQUIRE(server.ok());
  CHECK(Eventually([&] { return engine->alive(); }));
  auto reqs = server.requests();
  REQUIRE_FALSE(reqs.empty());
  CHECK(reqs[0].target == "/health");
  h = engine->Submit(Prompt());
  REQUIRE(h.ok());
  CHECK((*h)->Wait().text == "Hello!");
}

TEST_CASE("remote: ProbePrefix answers from the prompts sent, in whole blocks, per salt") {
  FakeOpenAiServer server;
  auto engine = Open(server.url());
  std::vector<int32_t> prompt(40);
  for (int i = 0; i < 40; ++i) prompt[static_cast<size_t>(i)] = 100 + i;
  CHECK(engine->ProbePrefix(prompt, 0) == 0);
  GenerationRequest r = Prompt(prompt);
  r.cache_salt = 7;
  auto h = engine->Submit(r);
  REQUIRE(h.ok());
  (*h)->Wait();
  CHECK(engine->ProbePrefix(prompt, 7) == 32);
  CHECK(engine->ProbePrefix(prompt, 0) == 0);  // another tenant
  std::vector<int32_t> other = prompt;
  other[20] = 1;  // differs in the second block
  CHECK(engine->ProbePrefix(other, 7) == 16);
  other[0] = 1;
  CHECK(engine->ProbePrefix(other, 7) == 0);
  CHECK(engine->Pin(prompt, 7) == 0);
  engine->Unpin(0);
}

TEST_CASE("PrefixMemory: bounded; the least recently sent blocks go first, tails before heads") {
  remote::PrefixMemory m(4);
  std::vector<int32_t> a(48, 1), b(48, 2);
  m.Remember(a, 0);
  CHECK(m.LongestPrefix(a, 0) == 48);
  m.Remember(b, 0);  // 3 more blocks: two of a's go, its tail first
  CHECK(m.size() == 4);
  CHECK(m.LongestPrefix(b, 0) == 48);
  CHECK(m.LongestPrefix(a, 0) == 16);
  std::vector<int32_t> short_prompt(15, 3);
  m.Remember(short_prompt, 0);  // no full block
  CHECK(m.LongestPrefix(short_prompt, 0) == 0);
}

TEST_CASE("SseReader: events across reads, CRLF, multi-line data, comments") {
  remote::SseReader r;
  std::vector<std::string> out;
  r.Feed(": keep-alive\n\nda", &out);
  CHECK(out.empty());
  r.Feed("ta: {\"a\":1}\r\n\r\ndata: x\ndata: y\n", &out);
  REQUIRE(out.size() == 1);
  CHECK(out[0] == "{\"a\":1}");
  r.Feed("event: ignored\n\ndata:[DONE]", &out);
  REQUIRE(out.size() == 2);
  CHECK(out[1] == "x\ny");
  CHECK(r.Finish() == std::optional<std::string>("[DONE]"));
  CHECK(!r.Finish().has_value());
}

TEST_CASE("ParseCompletionChunk: fields, nulls and malformed chunks") {
  auto c = remote::ParseCompletionChunk(
      R"({"choices":[{"text":"a","finish_reason":null,"logprobs":{"token_logprobs":[-0.5]}}],)"
      R"("usage":null})");
  REQUIRE(c.ok());
  CHECK(c->text == "a");
  CHECK(c->finish_reason.empty());
  CHECK(c->logprobs == std::vector<float>{-0.5f});
  CHECK_FALSE(c->has_usage);
  c = remote::ParseCompletionChunk(R"({"choices":[],"usage":{"prompt_tokens":3,)"
                                   R"("completion_tokens":1,"prompt_tokens_details":null}})");
  REQUIRE(c.ok());
  CHECK(c->has_usage);
  CHECK(c->usage.prompt_tokens == 3);
  CHECK(c->usage.cached_tokens == 0);
  CHECK(remote::ParseCompletionChunk("[DONE]")->done);
  for (const char* bad : {"{", "[1]", R"({"choices":3})", R"({"choices":[{"text":5}]})",
                          R"({"usage":{"prompt_tokens":-1}})"}) {
    CAPTURE(bad);
    auto r = remote::ParseCompletionChunk(bad);
    CHECK(r.status().code() == StatusCode::kCorruption);
  }
  CHECK(remote::ErrorBodyMessage(R"({"detail":"Not Found"})") == "Not Found");
  CHECK(remote::ErrorBodyMessage("plain text") == "plain text");
}

TEST_CASE("CompletionRequestBody: text prompts, penalties and extras only when set") {
  GenerationRequest r;
  r.prompt_text = "hi";
  r.sampling.seed = 0xFFFFFFFFFFFFull;
  auto body = nlohmann::json::parse(remote::CompletionRequestBody(r, "m"));
  CHECK(body["prompt"] == "hi");
  CHECK(body["seed"].get<int64_t>() >= 0);
  CHECK(body["seed"].get<int64_t>() <= 0x7fffffff);
  CHECK_FALSE(body.contains("stop"));
  CHECK_FALSE(body.contains("logprobs"));
  CHECK_FALSE(body.contains("ignore_eos"));
  CHECK_FALSE(body.contains("frequency_penalty"));
  r.sampling.frequency_penalty = 0.5f;
  r.sampling.ignore_eos = true;
  r.sampling.stop_tokens = {7};
  body = nlohmann::json::parse(remote::CompletionRequestBody(r, "m"));
  CHECK(body["frequency_penalty"].get<double>() == doctest::Approx(0.5));
  CHECK(body["ignore_eos"] == true);
  CHECK(body["stop_token_ids"] == std::vector<int>{7});
}
