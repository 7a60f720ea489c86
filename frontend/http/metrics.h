// Serving metrics of the HTTP API: per-request latencies as fixed-bucket
// histograms, tokens in and out (in all and per client), and their rendering,
// with the engines' own gauges, in the Prometheus text format (version
// 0.0.4) for a /metrics route. Names follow vLLM's (braid:
// time_to_first_token_seconds, inter_token_latency_seconds, ...).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace braid::http {

// Counts of observations at or below each upper bound (seconds), their sum
// and count. Plain data; ServingMetrics fills it under its lock.
struct Histogram {
  std::vector<double> bounds;    // ascending upper bounds; +Inf is implied
  std::vector<uint64_t> counts;  // per bound, not cumulative; one more for +Inf
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> upper_bounds = {});
  void Observe(double value);
};

struct ClientTokens {
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
};

// Everything recorded so far (a copy: render it without holding the lock).
struct MetricsSnapshot {
  Histogram ttft{}, inter_token{}, queue{}, e2e{};
  uint64_t requests = 0, request_errors = 0;
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  // By client identity (Request::client; "" = no API keys). At most
  // ServingMetrics::kMaxClients names; later ones count under "other".
  std::map<std::string, ClientTokens> clients;
};

// Thread-safe: handlers on any worker thread record, a /metrics route reads.
class ServingMetrics {
 public:
  static constexpr size_t kMaxClients = 1000;

  ServingMetrics();
  // One engine request (one choice) finished: its timings (milliseconds,
  // engine/request.h) go into the histograms. `error`: it failed.
  void ObserveTimings(const Timings& t, bool error);
  // One API request finished: its tokens, for the totals and its client.
  void ObserveRequest(const std::string& client, uint64_t prompt_tokens,
                      uint64_t completion_tokens);
  MetricsSnapshot Snapshot() const;

 private:
  mutable std::mutex mu_;
  MetricsSnapshot m_;
};

// Leaves out of `m` and `engines` the per-client figures of every client but
// `client`; the totals stay. What a key that may not see other clients gets
// (docs/http-api.md, "Clients and ownership").
void KeepOnlyClient(const std::string& client, MetricsSnapshot* m,
                    std::vector<EngineStats>* engines);

// The Prometheus text exposition of `m` and of each engine's stats (label
// engine="<index>"), every series labelled model_name="<model_name>".
// Metrics: braid:time_to_first_token_seconds, inter_token_latency_seconds,
// request_queue_time_seconds, e2e_request_latency_seconds (histograms);
// requests_total, request_errors_total, prompt_tokens_total,
// generation_tokens_total, client_prompt_tokens_total,
// client_generation_tokens_total, client_requests_total (label client);
// num_requests_running, num_requests_waiting, kv_blocks_used, kv_blocks_free,
// kv_blocks_cached, kv_blocks_total, kv_slides_total, kv_cache_usage_perc (gauges);
// kv_slides_taken_back_total, prefix_cache_queries_total,
// prefix_cache_hits_total (tokens), engine_preemptions_total.
std::string RenderPrometheus(const MetricsSnapshot& m, std::span<const EngineStats> engines,
                             std::string_view model_name);

}  // namespace braid::http
