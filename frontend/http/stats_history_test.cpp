// The dashboard's history of engine figures: rates over each interval, the
// samples kept, and what a reader asks for.
#include "http/stats_history.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

namespace braid::http {
namespace {

EngineStats Stats(uint64_t prompt, uint64_t cached, uint64_t generated, int running) {
  EngineStats s;
  s.prompt_tokens = prompt;
  s.cached_prompt_tokens = cached;
  s.generated_tokens = generated;
  s.running = running;
  s.kv_blocks_total = 100;
  s.kv_blocks_free = 60;
  return s;
}

TEST_CASE("stats history: rates over the interval per engine and client") {
  StatsHistory h("m", {{"engine0", "m.gguf", "cpu"}}, 3);
  EngineStats a = Stats(100, 0, 10, 1);
  a.clients.push_back({"alice", 100, 10, 0, 1, 5});
  h.Record(1000.0, {a}, {});
  EngineStats b = Stats(300, 150, 50, 2);
  b.clients.push_back({"alice", 200, 30, 0, 1, 9});
  b.clients.push_back({"bob", 100, 20, 1, 1, 3});
  h.Record(1002.0, {b}, {0, 1, 2, 0, 0});

  auto j = nlohmann::json::parse(h.Json(0));
  CHECK(j["model"] == "m");
  CHECK(j["seq"] == 2);
  CHECK(j["engines"][0]["name"] == "engine0");
  REQUIRE(j["samples"].size() == 2u);
  const auto& first = j["samples"][0]["engines"][0];
  CHECK(first["prefix_hit_rate"].is_null());  // nothing before it
  CHECK(first["generated_tokens_per_s"] == 0.0);
  const auto& s = j["samples"][1];
  CHECK(s["runs"]["running"] == 1);
  CHECK(s["runs"]["done"] == 2);
  const auto& e = s["engines"][0];
  CHECK(e["generated_tokens_per_s"].get<double>() == doctest::Approx(20.0));  // 40 tokens in 2 s
  CHECK(e["prompt_tokens_per_s"].get<double>() == doctest::Approx(100.0));
  CHECK(e["prefix_hit_rate"].get<double>() ==
        doctest::Approx(0.75));  // 150 of 200 new prompt tokens
  CHECK(e["kv_blocks_used"] == 40);
  REQUIRE(s["clients"].size() == 2u);
  CHECK(s["clients"][0]["client"] == "alice");
  CHECK(s["clients"][0]["engine"] == "engine0");
  CHECK(s["clients"][0]["generated_tokens_per_s"].get<double>() == doctest::Approx(10.0));
  CHECK(s["clients"][1]["generated_tokens_per_s"].get<double>() ==
        doctest::Approx(10.0));  // new: from 0
  CHECK(s["clients"][1]["counter"] == 3.0);
}

TEST_CASE("stats history keeps the last samples and answers only newer ones") {
  StatsHistory h("m", {{"engine0", "m.gguf", "cpu"}}, 3);
  for (int i = 0; i < 5; ++i) h.Record(1000.0 + i, {Stats(10 * i, 0, i, 0)}, {});
  auto all = nlohmann::json::parse(h.Json(0));
  REQUIRE(all["samples"].size() == 3u);  // capacity
  CHECK(all["samples"][0]["seq"] == 3);
  CHECK(all["samples"][2]["seq"] == 5);
  auto newer = nlohmann::json::parse(h.Json(4));
  REQUIRE(newer["samples"].size() == 1u);
  CHECK(newer["samples"][0]["seq"] == 5);
  CHECK(nlohmann::json::parse(h.Json(5))["samples"].size() == 0u);
  // A counter that went back (an engine restarted) gives a rate of 0, not a wrap.
  h.Record(1010.0, {Stats(0, 0, 0, 0)}, {});
  auto last = nlohmann::json::parse(h.Json(5));
  CHECK(last["samples"][0]["engines"][0]["generated_tokens_per_s"] == 0.0);
}

}  // namespace
}  // namespace braid::http
