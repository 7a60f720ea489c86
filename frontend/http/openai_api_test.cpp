// The OpenAI-compatible routes driven through the Router with plain Request
// objects, on a real engine with the bundled model: results against the
// engine's own, stream framing, n, logprobs shapes, response_format, the
// validation errors, tokenization, the prefix cache and cancellation.
#include "http/openai_api.h"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/engine.h"

namespace braid::http {
namespace {

using nlohmann::json;

bool HaveModel() { return std::filesystem::exists(BRAID_MODEL_PATH); }

constexpr int kContext = 1024;

EngineOptions TestEngineOptions() {
  EngineOptions o;
  o.model.path = BRAID_MODEL_PATH;
  o.model.threads = 1;
  o.model.context = kContext;
  o.model.cpu.stream = CpuOptions::Stream::kTemporal;  // no timing of both variants at load
  o.kv_tokens = 4096;
  o.max_batch_tokens = 128;
  return o;
}

// One engine and service for the whole file (opening the model once).
struct Fixture {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Model> tokenizer;
  ServingMetrics metrics;
  Router router;

  Fixture() {
    auto e = Engine::Open(TestEngineOptions());
    REQUIRE(e.ok());
    engine = std::move(e).value();
    ModelOptions mo;
    mo.path = BRAID_MODEL_PATH;
    mo.threads = 1;
    mo.context = kContext;
    mo.cpu.stream = CpuOptions::Stream::kTemporal;
    auto m = Model::Open(mo);
    REQUIRE(m.ok());
    tokenizer = std::move(m).value();
    OpenAiOptions o;
    o.model_name = "smollm2";
    o.tokenizer = tokenizer.get();
    o.engines = {engine.get()};
    o.max_n = 4;
    o.metrics = &metrics;
    AddOpenAiRoutes(&router, std::make_shared<OpenAiService>(o));
  }
};

Fixture& Fix() {
  static Fixture f;
  return f;
}

Request Post(std::string path, const json& body, std::string client = "alice") {
  Request r;
  r.method = "POST";
  r.path = path;
  r.target = path;
  r.body = body.dump();
  r.client = std::move(client);
  return r;
}

json Body(const Response& r) {
  REQUIRE(!r.stream);
  return json::parse(r.body);
}

// The data payloads of a streamed response, until it closes.
std::vector<std::string> Events(const Response& r) {
  REQUIRE(r.stream);
  std::string buf;
  bool closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!closed && std::chrono::steady_clock::now() < deadline) {
    std::vector<std::string> chunks;
    r.stream->Take(&chunks, &closed);
    for (auto& c : chunks) buf += c;
    if (chunks.empty() && !closed) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(closed);
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = buf.find("\n\n", start);
    if (end == std::string::npos) break;
    std::string data;
    std::string_view ev(buf.data() + start, end - start);
    size_t line = 0;
    while (line < ev.size()) {
      size_t nl = ev.find('\n', line);
      if (nl == std::string_view::npos) nl = ev.size();
      std::string_view l = ev.substr(line, nl - line);
      if (l.rfind("data: ", 0) == 0) data += std::string(l.substr(6));
      line = nl + 1;
    }
    out.push_back(data);
    start = end + 2;
  }
  return out;
}

TEST_CASE("/v1/models lists the one model; another id is 404 model_not_found") {
  if (!HaveModel()) return;
  Request r;
  r.method = "GET";
  r.path = "/v1/models";
  json list = Body(Fix().router.Handle(r));
  CHECK(list["object"] == "list");
  REQUIRE(list["data"].size() == 1);
  CHECK(list["data"][0]["id"] == "smollm2");
  CHECK(list["data"][0]["max_model_len"] == kContext);
  r.path = "/v1/models/smollm2";
  CHECK(Body(Fix().router.Handle(r))["id"] == "smollm2");
  r.path = "/v1/models/gpt-4";
  Response missing = Fix().router.Handle(r);
  CHECK(missing.status == 404);
  CHECK(json::parse(missing.body)["error"]["code"] == "model_not_found");
}

TEST_CASE("a greedy completion equals the engine's own result for the same tokens") {
  if (!HaveModel()) return;
  Fixture& f = Fix();
  const std::string prompt = "The capital of France is";
  Response r = f.router.Handle(
      Post("/v1/completions",
           {{"model", "smollm2"}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}}));
  REQUIRE(r.status == 200);
  json b = Body(r);

  GenerationRequest g;
  g.prompt = f.tokenizer->TokenizeRaw(prompt);
  g.sampling = SamplingParams::Greedy();
  g.sampling.max_tokens = 8;
  auto h = f.engine->Submit(g);
  REQUIRE(h.ok());
  const Completion c = (*h)->Wait();

  CHECK(b["object"] == "text_completion");
  CHECK(b["model"] == "smollm2");
  CHECK(b["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  REQUIRE(b["choices"].size() == 1);
  CHECK(b["choices"][0]["text"] == c.text);
  CHECK(!c.text.empty());
  CHECK(b["choices"][0]["finish_reason"] == c.finish_reason);
  CHECK(b["choices"][0]["logprobs"].is_null());
  CHECK(b["usage"]["prompt_tokens"] == g.prompt.size());
  CHECK(b["usage"]["completion_tokens"] == c.usage.generated_tokens);
  CHECK(b["usage"]["total_tokens"] == g.prompt.size() + c.usage.generated_tokens);
  CHECK(b["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());

  // Token ids as the prompt give the same text.
  json ids = Body(f.router.Handle(
      Post("/v1/completions", {{"prompt", g.prompt}, {"max_tokens", 8}, {"temperature", 0}})));
  CHECK(ids["choices"][0]["text"] == c.text);
}

TEST_CASE("a streamed completion's pieces add up to the whole text, then usage and [DONE]") {
  if (!HaveModel()) return;
  Fixture& f = Fix();
  const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}};
  const std::string whole =
      Body(f.router.Handle(Post("/v1/completions", req)))["choices"][0]["text"];

  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  Response r = f.router.Handle(Post("/v1/completions", sreq));
  REQUIRE(r.status == 200);
  CHECK(r.content_type == "text/event-stream");
  std::vector<std::string> events = Events(r);
  REQUIRE(events.size() >= 3);
  CHECK(events.back() == "[DONE]");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json e = json::parse(events[i]);
    CHECK(e["object"] == "text_completion");
    REQUIRE(e["choices"].size() == 1);
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  CHECK(text == whole);
  CHECK((finish == "stop" || finish == "length"));
  json usage = json::parse(events[events.size() - 2]);
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["completion_tokens"].get<int>() > 0);
}

TEST_CASE("a streamed chat starts with the role, then content, finish_reason last") {
  if (!HaveModel()) return;
  Fixture& f = Fix();
  const json req = {{"messages", {{{"role", "user"}, {"content", "Say hello."}}}},
                    {"max_tokens", 10},
                    {"temperature", 0}};
  json whole = Body(f.router.Handle(Post("/v1/chat/completions", req)));
  CHECK(whole["object"] == "chat.completion");
  CHECK(whole["choices"][0]["message"]["role"] == "assistant");
  json sreq = req;
  sreq["stream"] = true;
  std::vector<std::string> events = Events(f.router.Handle(Post("/v1/chat/completions", sreq)));
  REQUIRE(events.size() >= 3);
  CHECK(events.back() == "[DONE]");
  json first = json::parse(events[0]);
  CHECK(first["object"] == "chat.completion.chunk");
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  std::string text;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    json d = json::parse(events[i])["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
  }
  CHECK(text == whole["choices"][0]["message"]["content"].get<std::string>());
  json last = json::parse(events[events.size() - 2]);
  CHECK(last["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]);
  CHECK(!last.contains("usage"));  // no include_usage
}

TEST_CASE("n=3 with a seed gives three choices; the same seed gives them again") {
  if (!HaveModel()) return;
  Fixture& f = Fix();
  const json req = {{"prompt", "My favourite colour is"},
                    {"max_tokens", 6},
                    {"n", 3},
                    {"seed", 1234},
                    {"temperature", 1.0}};
  json a = Body(f.router.Handle(Post("/v1/completions", req)));
  REQUIRE(a["choices"].size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(a["choices"][i]["index"] == i);
  CHECK(a["usage"]["completion_tokens"].get<int>() > 0);
  CHECK(a["usage"]["completion_tokens"].get<int>() <= 18);
  // Streamed, the same three choices arrive interleaved by index.
  json sreq = req;
  sreq["stream"] = true;
  std::vector<std::string> events = Events(f.router.Handle(Post("/v1/completions", sreq)));
  std::vector<std::string> texts(3);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json c = json::parse(events[i])["choices"][0];
    texts[c["index"].get<size_t>()] += c["text"].get<std::string>();
  }
  for (int i = 0; i < 3; ++i)
    CHECK(texts[static_cast<size_t>(i)] == a["choices"][i]["text"].get<std::string>());
}

TEST_CASE("completion logprobs have OpenAI's shape and agree with greedy choice") {
  if (!HaveModel()) return;
  json b = Body(Fix().router.Handle(
      Post("/v1/completions",
           {{"prompt", "1, 2, 3, 4,"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 2}})));
  json lp = b["choices"][0]["logprobs"];
  const size_t n = b["usage"]["completion_tokens"];
  REQUIRE(n > 0);
  CHECK(lp["tokens"].size() == n);
  CHECK(lp["token_logprobs"].size() == n);
  CHECK(lp["top_logprobs"].size() == n);
  REQUIRE(lp["text_offset"].size() == n);
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    CHECK(lp["text_offset"][i] == offset);
    offset += lp["tokens"][i].get<std::string>().size();
    const double l = lp["token_logprobs"][i];
    CHECK(l <= 0.0);
    const json& top = lp["top_logprobs"][i];
    CHECK(top.size() >= 1);
    CHECK(top.size() <= 2);
    double best = -1e30;
    for (auto& [tok, v] : top.items()) best = std::max(best, v.get<double>());
    CHECK(l == doctest::Approx(best).epsilon(1e-4));  // greedy takes the most likely
  }
}

TEST_CASE("chat logprobs have OpenAI's shape: token, logprob, bytes, top_logprobs") {
  if (!HaveModel()) return;
  json b = Body(Fix().router.Handle(Post(
      "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Count to three."}}}},
                               {"max_tokens", 3},
                               {"temperature", 0},
                               {"logprobs", true},
                               {"top_logprobs", 3}})));
  json content = b["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == b["usage"]["completion_tokens"].get<size_t>());
  for (const json& t : content) {
    CHECK(t["logprob"].get<double>() <= 0.0);
    const std::string tok = t["token"];
    REQUIRE(t["bytes"].size() == tok.size());
    for (size_t i = 0; i < tok.size(); ++i)
      CHECK(t["bytes"][i] == static_cast<int>(static_cast<uint8_t>(tok[i])));
    CHECK(t["top_logprobs"].size() == 3);
    CHECK(t["top_logprobs"][0].contains("bytes"));
  }
}

TEST_CASE("chat with a json_schema response_format returns JSON that validates") {
  if (!HaveModel()) return;
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"name", {{"type", "string"}, {"maxLength", 12}}},
                         {"age", {{"type", "integer"}}},
                         {"pet", {{"enum", json::array({"cat", "dog"})}}}}},
                       {"required", {"name", "age", "pet"}}};
  json b = Body(Fix().router.Handle(Post(
      "/v1/chat/completions",
      {{"messages", {{{"role", "user"}, {"content", "Describe a person called Ann as JSON."}}}},
       {"max_tokens", 60},
       {"temperature", 0},
       {"response_format",
        {{"type", "json_schema"},
         {"json_schema", {{"name", "person"}, {"schema", schema}, {"strict", true}}}}}})));
  REQUIRE(b["choices"].size() == 1);
  const std::string text = b["choices"][0]["message"]["content"];
  CHECK(b["choices"][0]["finish_reason"] == "stop");
  json out = json::parse(text, nullptr, false);
  REQUIRE_MESSAGE(!out.is_discarded(), text);
  REQUIRE(out.is_object());
  CHECK(out["name"].is_string());
  CHECK(out["name"].get<std::string>().size() <= 12);
  CHECK(out["age"].is_number_integer());
  CHECK((out["pet"] == "cat" || out["pet"] == "dog"));
  CHECK(out.size() == 3);

  json obj = Body(Fix().router.Handle(
      Post("/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", "Give a JSON object."}}}},
            {"max_tokens", 24},
            {"temperature", 0},
            {"response_format", {{"type", "json_object"}}}})));
  const std::string otext = obj["choices"][0]["message"]["content"];
  if (obj["choices"][0]["finish_reason"] == "stop") {
    json o = json::parse(otext, nullptr, false);
    CHECK_MESSAGE(o.is_object(), otext);
  } else {
    CHECK(otext.rfind("{", 0) == 0);  // cut by max_tokens, but an object so far
  }
}

struct BadCase {
  const char* path;
  std::string body;
  int status;
  const char* param;
};

TEST_CASE("invalid requests are 400 (404 for the model) naming the param") {
  if (!HaveModel()) return;
  const std::string m = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::string long_prompt(800 * 4, 'a');  // far more than 10 tokens
  const std::vector<BadCase> cases = {
      {"/v1/completions", R"({})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": 5})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": []})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": ["a", "b"]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": [1, -2]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": [1, 99999999]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": -1})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 1025})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": "ten"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 2.5})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": ")" + long_prompt + R"(", "max_tokens": 1014})", 400,
       "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "temperature": -0.1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "hi", "temperature": 2.5})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "hi", "temperature": "hot"})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "hi", "top_p": 0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "hi", "top_p": 1.5})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 4, "min_tokens": 5})", 400,
       "min_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "n": 0})", 400, "n"},
      {"/v1/completions", R"({"prompt": "hi", "n": 5})", 400, "n"},
      {"/v1/completions", R"({"prompt": "hi", "stop": 3})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "hi", "stop": [""]})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "hi", "logprobs": 21})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt": "hi", "echo": true})", 400, "echo"},
      {"/v1/completions", R"({"prompt": "hi", "stream": "yes"})", 400, "stream"},
      {"/v1/completions", R"({"prompt": "hi", "model": "gpt-4"})", 404, "model"},
      {"/v1/chat/completions", R"({})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", 400,
       "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 7}]})", 400,
       "messages[0].content"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages[0].content[0]"},
      {"/v1/chat/completions", "{" + m + R"(, "max_completion_tokens": -5})", 400,
       "max_completion_tokens"},
      {"/v1/chat/completions", "{" + m + R"(, "top_logprobs": 2})", 400, "top_logprobs"},
      {"/v1/chat/completions", "{" + m + R"(, "tools": [{"type": "function"}]})", 400, "tools"},
      {"/v1/chat/completions", "{" + m + R"(, "response_format": {"type": "yaml"}})", 400,
       "response_format.type"},
      {"/v1/chat/completions",
       "{" + m +
           R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "a+"}}}})",
       400, "response_format.json_schema.schema"},
      {"/v1/chat/completions", "{" + m + R"(, "model": "other"})", 404, "model"},
      {"/tokenize", R"({"prompt": 3})", 400, "prompt"},
      {"/detokenize", R"({"tokens": [1, 99999999]})", 400, "tokens"},
      {"/detokenize", R"({"tokens": "abc"})", 400, "tokens"},
  };
  for (const BadCase& c : cases) {
    CAPTURE(c.path);
    CAPTURE(c.body);
    Request req = Post(c.path, json::object());
    req.body = c.body;
    Response r = Fix().router.Handle(req);
    CHECK(r.status == c.status);
    json e = json::parse(r.body);
    REQUIRE(e.contains("error"));
    CHECK(e["error"]["param"] == c.param);
    CHECK(!e["error"]["message"].get<std::string>().empty());
  }
  // The context message names both numbers and their sum.
  Response r = Fix().router.Handle(
      Post("/v1/completions", {{"prompt", {1, 2, 3, 4}}, {"max_tokens", kContext - 2}}));
  CHECK(r.status == 400);
  CHECK(json::parse(r.body)["error"]["message"] ==
        "the prompt has 4 tokens and max_tokens is 1022: 4+1022 exceeds the context of 1024 "
        "tokens");
  // Not JSON, and JSON nested past the limit.
  Request bad = Post("/v1/completions", json::object());
  bad.body = "{\"prompt\": ";
  CHECK(Fix().router.Handle(bad).status == 400);
  bad.body = std::string(100, '[') + std::string(100, ']');
  CHECK(Fix().router.Handle(bad).status == 400);
}

TEST_CASE("/tokenize equals the model's tokenization; /detokenize inverts it") {
  if (!HaveModel()) return;
  Fixture& f = Fix();
  const std::string text = "Hello, world! <|im_start|> tokens";
  json t = Body(f.router.Handle(Post("/tokenize", {{"prompt", text}})));
  const std::vector<int32_t> want = f.tokenizer->TokenizeRaw(text);
  CHECK(t["tokens"].get<std::vector<int32_t>>() == want);
  CHECK(t["count"] == want.size());
  CHECK(t["max_model_len"] == kContext);

  const std::vector<ChatMessage> msgs = {{"user", "Hi there"}};
  json c = Body(f.router.Handle(
      Post("/tokenize", {{"messages", {{{"role", "user"}, {"content", "Hi there"}}}}})));
  CHECK(c["tokens"].get<std::vector<int32_t>>() ==
        f.tokenizer->Tokenize(f.tokenizer->FormatChat(msgs, true)));

  json d = Body(f.router.Handle(Post("/detokenize", {{"tokens", want}})));
  CHECK(d["prompt"] == f.tokenizer->Detokenize(want));
}

TEST_CASE("a repeated long prompt reports cached prompt tokens") {
  if (!HaveModel()) return;
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "The quick brown fox jumps over the lazy dog. ";
  const json req = {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}};
  json a = Body(Fix().router.Handle(Post("/v1/completions", req)));
  json b = Body(Fix().router.Handle(Post("/v1/completions", req)));
  CHECK(a["usage"]["prompt_tokens"].get<int>() > 64);
  CHECK(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0);
}

TEST_CASE("a client that disconnects from a stream cancels its engine request") {
  if (!HaveModel()) return;
  Fixture& f = Fix();
  const uint64_t cancelled_before = f.engine->stats().requests_cancelled;
  Response r = f.router.Handle(Post("/v1/completions", {{"prompt", "Write a long story."},
                                                        {"max_tokens", 500},
                                                        {"ignore_eos", true},
                                                        {"stream", true}}));
  REQUIRE(r.stream);
  // Wait for the first piece, then go away as a session does.
  bool closed = false;
  std::vector<std::string> chunks;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (chunks.empty() && std::chrono::steady_clock::now() < deadline) {
    r.stream->Take(&chunks, &closed);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(!chunks.empty());
  r.stream->Cancel();
  // The engine cancels the request rather than generating all 500 tokens (the
  // minute is only a bound on a hang).
  bool seen = false;
  const auto cancel_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!seen && std::chrono::steady_clock::now() < cancel_deadline) {
    const EngineStats s = f.engine->stats();
    seen = s.requests_cancelled > cancelled_before && s.running == 0;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK_MESSAGE(seen, "the engine did not cancel the request within 60 s");
}

TEST_CASE("the serving metrics saw the requests, per client") {
  if (!HaveModel()) return;
  Fixture& f = Fix();
  Body(f.router.Handle(Post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 3}}, "bob")));
  const MetricsSnapshot m = f.metrics.Snapshot();
  CHECK(m.requests > 0);
  CHECK(m.ttft.count > 0);
  CHECK(m.inter_token.count > 0);
  REQUIRE(m.clients.count("bob") == 1);
  CHECK(m.clients.at("bob").requests == 1);
  CHECK(m.clients.at("bob").prompt_tokens > 0);
  const EngineStats s = f.engine->stats();
  const std::string text = RenderPrometheus(m, std::span<const EngineStats>(&s, 1), "smollm2");
  CHECK(text.find("braid:client_prompt_tokens_total{model_name=\"smollm2\",client=\"bob\"}") !=
        std::string::npos);
}

TEST_CASE("a full engine queue is 429 with Retry-After") {
  if (!HaveModel()) return;
  EngineOptions o = TestEngineOptions();
  o.kv_tokens = 512;
  o.max_waiting = 0;  // every Submit is refused
  auto e = Engine::Open(o);
  REQUIRE(e.ok());
  OpenAiOptions opts;
  opts.model_name = "m";
  opts.tokenizer = Fix().tokenizer.get();
  opts.engines = {e->get()};
  Router router;
  AddOpenAiRoutes(&router, std::make_shared<OpenAiService>(opts));
  for (bool stream : {false, true}) {
    Response r = router.Handle(
        Post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}, {"stream", stream}}));
    CHECK(r.status == 429);
    CHECK(!r.stream);
    REQUIRE(r.headers.size() == 1);
    CHECK(r.headers[0].first == "Retry-After");
    CHECK(json::parse(r.body)["error"]["type"] == "rate_limit_error");
  }
}

TEST_CASE("an engine that stops mid-stream gives an error event, then [DONE]") {
  if (!HaveModel()) return;
  EngineOptions o = TestEngineOptions();
  o.kv_tokens = 1024;
  auto e = Engine::Open(o);
  REQUIRE(e.ok());
  OpenAiOptions opts;
  opts.model_name = "m";
  opts.tokenizer = Fix().tokenizer.get();
  opts.engines = {e->get()};
  Router router;
  AddOpenAiRoutes(&router, std::make_shared<OpenAiService>(opts));
  Response r =
      router.Handle(Post("/v1/completions", {{"prompt", "Tell me a story."},
                                             {"max_tokens", 500},
                                             {"ignore_eos", true},
                                             {"stream", true},
                                             {"stream_options", {{"include_usage", true}}}}));
  REQUIRE(r.stream);
  // Once it has generated tokens, stop the engine under it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((*e)->stats().generated_tokens == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE_MESSAGE((*e)->stats().generated_tokens > 0, "no token generated within 60 s");
  (*e)->Shutdown();
  std::vector<std::string> events = Events(r);
  REQUIRE(events.size() >= 2);
  CHECK(events.back() == "[DONE]");
  json err = json::parse(events[events.size() - 2]);
  REQUIRE(err.contains("error"));
  CHECK(err["error"]["type"] == "server_error");
  CHECK(!err["error"]["message"].get<std::string>().empty());
  for (const std::string& ev : events) CHECK(ev.find("\"usage\":{") == std::string::npos);
}

TEST_CASE("with two engines a request goes to the one that cached its prompt") {
  if (!HaveModel()) return;
  EngineOptions o = TestEngineOptions();
  o.kv_tokens = 1024;
  auto a = Engine::Open(o);
  auto b = Engine::Open(o);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  OpenAiOptions opts;
  opts.model_name = "m";
  opts.tokenizer = Fix().tokenizer.get();
  opts.engines = {a->get(), b->get()};
  Router router;
  AddOpenAiRoutes(&router, std::make_shared<OpenAiService>(opts));

  std::string prompt;
  for (int i = 0; i < 8; ++i) prompt += "A long shared prefix that both requests start with. ";
  // Warm the second engine's prefix cache directly.
  GenerationRequest g;
  g.prompt = Fix().tokenizer->TokenizeRaw(prompt);
  g.sampling = SamplingParams::Greedy();
  g.sampling.max_tokens = 1;
  auto h = (*b)->Submit(g);
  REQUIRE(h.ok());
  (*h)->Wait();
  REQUIRE((*b)->ProbePrefix(g.prompt, 0) > 0);
  REQUIRE((*a)->ProbePrefix(g.prompt, 0) == 0);

  const uint64_t a_before = (*a)->stats().requests_finished;
  const uint64_t b_before = (*b)->stats().requests_finished;
  json r = Body(router.Handle(
      Post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}})));
  CHECK(r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0);
  // The engines count a request a moment after its caller sees it finish (the
  // minute is only a bound on a hang).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if ((*a)->stats().requests_finished + (*b)->stats().requests_finished > a_before + b_before)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK((*a)->stats().requests_finished == a_before);
  CHECK((*b)->stats().requests_finished == b_before + 1);
}

}  // namespace
}  // namespace braid::http
