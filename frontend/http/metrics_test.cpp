// Serving metrics: histogram buckets, per-client counts and their cap, and
// the Prometheus text rendering.
#include "http/metrics.h"

#include <doctest/doctest.h>

namespace braid::http {
namespace {

TEST_CASE("a histogram counts each value under the first bound at or above it") {
  Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 2.0, 3.0}) h.Observe(v);
  CHECK(h.counts == std::vector<uint64_t>{2, 1, 2});
  CHECK(h.count == 5);
  CHECK(h.sum == doctest::Approx(5.65));
}

TEST_CASE("serving metrics record timings in seconds and tokens per client") {
  ServingMetrics m;
  Timings t;
  t.queue_ms = 2;
  t.ttft_ms = 30;
  t.total_ms = 130;
  t.inter_token_ms = {50, 50};
  m.ObserveTimings(t, false);
  m.ObserveTimings(t, true);  // a failure counts, without timings
  m.ObserveRequest("alice", 10, 3);
  m.ObserveRequest("alice", 5, 1);
  m.ObserveRequest("bob", 7, 2);
  const MetricsSnapshot s = m.Snapshot();
  CHECK(s.requests == 2);
  CHECK(s.request_errors == 1);
  CHECK(s.ttft.count == 1);
  CHECK(s.ttft.sum == doctest::Approx(0.03));
  CHECK(s.inter_token.count == 2);
  CHECK(s.queue.sum == doctest::Approx(0.002));
  CHECK(s.prompt_tokens == 22);
  CHECK(s.completion_tokens == 6);
  CHECK(s.clients.at("alice").requests == 2);
  CHECK(s.clients.at("alice").prompt_tokens == 15);
  CHECK(s.clients.at("bob").completion_tokens == 2);
}

TEST_CASE("clients past the cap count under \"other\"") {
  ServingMetrics m;
  for (size_t i = 0; i < ServingMetrics::kMaxClients + 5; ++i)
    m.ObserveRequest("c" + std::to_string(i), 1, 1);
  const MetricsSnapshot s = m.Snapshot();
  CHECK(s.clients.size() == ServingMetrics::kMaxClients + 1);
  CHECK(s.clients.at("other").requests == 5);
}

TEST_CASE("the Prometheus text has cumulative buckets, totals and engine gauges") {
  ServingMetrics m;
  Timings t;
  t.ttft_ms = 30;
  t.total_ms = 100;
  m.ObserveTimings(t, false);
  t.ttft_ms = 3000;
  m.ObserveTimings(t, false);
  m.ObserveRequest("a\"b", 4, 2);
  EngineStats e;
  e.running = 2;
  e.waiting = 1;
  e.kv_blocks_total = 100;
  e.kv_blocks_free = 75;
  e.kv_blocks_cached = 10;
  e.kv_slides_total = 12;
  e.kv_slides_taken_back = 3;
  e.prompt_tokens = 400;
  e.cached_prompt_tokens = 120;
  e.spec_proposed = 50;
  e.spec_accepted = 30;
  e.clients.push_back({"alice", 300, 40, 2, 1, 380.5});
  const std::string text =
      RenderPrometheus(m.Snapshot(), std::span<const EngineStats>(&e, 1), "m1");
  auto has = [&](const std::string& line) {
    CAPTURE(line);
    CHECK(text.find(line + "\n") != std::string::npos);
  };
  has("# TYPE braid:time_to_first_token_seconds histogram");
  has("braid:time_to_first_token_seconds_bucket{model_name=\"m1\",le=\"0.04\"} 1");
  has("braid:time_to_first_token_seconds_bucket{model_name=\"m1\",le=\"2.5\"} 1");
  has("braid:time_to_first_token_seconds_bucket{model_name=\"m1\",le=\"5\"} 2");
  has("braid:time_to_first_token_seconds_bucket{model_name=\"m1\",le=\"+Inf\"} 2");
  has("braid:time_to_first_token_seconds_count{model_name=\"m1\"} 2");
  has("braid:time_to_first_token_seconds_sum{model_name=\"m1\"} 3.03");
  has("braid:prompt_tokens_total{model_name=\"m1\"} 4");
  has("braid:generation_tokens_total{model_name=\"m1\"} 2");
  has("braid:client_prompt_tokens_total{model_name=\"m1\",client=\"a\\\"b\"} 4");
  has("braid:num_requests_running{model_name=\"m1\",engine=\"0\"} 2");
  has("braid:num_requests_waiting{model_name=\"m1\",engine=\"0\"} 1");
  has("braid:kv_blocks_used{model_name=\"m1\",engine=\"0\"} 25");
  has("braid:kv_blocks_cached{model_name=\"m1\",engine=\"0\"} 10");
  has("braid:kv_blocks_total{model_name=\"m1\",engine=\"0\"} 100");
  has("braid:kv_cache_usage_perc{model_name=\"m1\",engine=\"0\"} 0.25");
  has("braid:kv_slides_total{model_name=\"m1\",engine=\"0\"} 12");
  has("braid:kv_slides_taken_back_total{model_name=\"m1\",engine=\"0\"} 3");
  has("braid:prefix_cache_queries_total{model_name=\"m1\",engine=\"0\"} 400");
  has("braid:prefix_cache_hits_total{model_name=\"m1\",engine=\"0\"} 120");
  has("braid:spec_decode_num_draft_tokens_total{model_name=\"m1\",engine=\"0\"} 50");
  has("braid:spec_decode_num_accepted_tokens_total{model_name=\"m1\",engine=\"0\"} 30");
  has("braid:engine_client_waiting{model_name=\"m1\",engine=\"0\",client=\"alice\"} 2");
  has("braid:engine_client_running{model_name=\"m1\",engine=\"0\",client=\"alice\"} 1");
  has("braid:engine_client_prompt_tokens_total{model_name=\"m1\",engine=\"0\",client=\"alice\"} "
      "300");
  has("braid:engine_client_generated_tokens_total{model_name=\"m1\",engine=\"0\",client=\"alice\"}"
      " 40");
  has("braid:engine_client_vtc_counter{model_name=\"m1\",engine=\"0\",client=\"alice\"} 380.5");
}

}  // namespace
}  // namespace braid::http
