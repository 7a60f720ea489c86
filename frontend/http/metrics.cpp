#include "http/metrics.h"

#include <algorithm>
#include <cstdio>

namespace braid::http {
namespace {

// Bucket bounds in seconds: TTFT and end-to-end from 1 ms to 2 min, the gap
// between tokens from 1 ms to 5 s (a CPU decode step is ~5-200 ms).
std::vector<double> LatencyBounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 120.0};
}
std::vector<double> InterTokenBounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1,
          0.15,  0.2,   0.3,  0.4,  0.5,  0.75, 1.0,  2.5,   5.0};
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A label value with '\', '"' and newlines escaped (the text format's rule).
std::string LabelValue(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Writer {
 public:
  explicit Writer(std::string_view model) : model_("model_name=\"" + LabelValue(model) + "\"") {}

  void Header(const std::string& name, const char* type, const char* help) {
    out_ += "# HELP braid:" + name + " " + help + "\n# TYPE braid:" + name + " " + type + "\n";
  }
  // name{model_name="m"<,extra>} value
  void Sample(const std::string& name, const std::string& extra, double value) {
    out_ += "braid:" + name + "{" + model_ + (extra.empty() ? "" : "," + extra) + "} " +
            Num(value) + "\n";
  }
  void Hist(const std::string& name, const char* help, const Histogram& h) {
    Header(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      Sample(name + "_bucket", "le=\"" + Num(h.bounds[i]) + "\"", static_cast<double>(cumulative));
    }
    Sample(name + "_bucket", "le=\"+Inf\"", static_cast<double>(h.count));
    Sample(name + "_sum", "", h.sum);
    Sample(name + "_count", "", static_cast<double>(h.count));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string model_;
  std::string out_;
};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  counts[i] += 1;  // i == bounds.size(): above every bound (+Inf)
  sum += value;
  count += 1;
}

ServingMetrics::ServingMetrics() {
  m_.ttft = Histogram(LatencyBounds());
  m_.inter_token = Histogram(InterTokenBounds());
  m_.queue = Histogram(LatencyBounds());
  m_.e2e = Histogram(LatencyBounds());
}

void ServingMetrics::ObserveTimings(const Timings& t, bool error) {
  std::lock_guard<std::mutex> lock(mu_);
  m_.requests += 1;
  if (error) {
    m_.request_errors += 1;
    return;
  }
  m_.queue.Observe(t.queue_ms / 1000.0);
  m_.e2e.Observe(t.total_ms / 1000.0);
  if (t.ttft_ms > 0) m_.ttft.Observe(t.ttft_ms / 1000.0);
  for (double gap : t.inter_token_ms) m_.inter_token.Observe(gap / 1000.0);
}

void ServingMetrics::ObserveRequest(const std::string& client, uint64_t prompt_tokens,
                                    uint64_t completion_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  m_.prompt_tokens += prompt_tokens;
  m_.completion_tokens += completion_tokens;
  auto it = m_.clients.find(client);
  if (it == m_.clients.end())
    it = m_.clients.size() < kMaxClients ? m_.clients.emplace(client, ClientTokens{}).first
                                         : m_.clients.emplace("other", ClientTokens{}).first;
  it->second.requests += 1;
  it->second.prompt_tokens += prompt_tokens;
  it->second.completion_tokens += completion_tokens;
}

MetricsSnapshot ServingMetrics::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return m_;
}

void KeepOnlyClient(const std::string& client, MetricsSnapshot* m,
                    std::vector<EngineStats>* engines) {
  std::erase_if(m->clients, [&](const auto& kv) { return kv.first != client; });
  for (EngineStats& e : *engines)
    std::erase_if(e.clients, [&](const EngineStats::ClientStats& c) { return c.client != client; });
}

std::string RenderPrometheus(const MetricsSnapshot& m, std::span<const EngineStats> engines,
                             std::string_view model_name) {
  Writer w(model_name);
  w.Hist("time_to_first_token_seconds", "Time from submission to the first token.", m.ttft);
  w.Hist("inter_token_latency_seconds", "Time between consecutive tokens of a request.",
         m.inter_token);
  w.Hist("request_queue_time_seconds", "Time from submission to the first scheduled step.",
         m.queue);
  w.Hist("e2e_request_latency_seconds", "Time from submission to the last token.", m.e2e);

  auto counter = [&](const char* name, const char* help, uint64_t v) {
    w.Header(name, "counter", help);
    w.Sample(name, "", static_cast<double>(v));
  };
  counter("requests_total", "Engine requests finished (one per choice).", m.requests);
  counter("request_errors_total", "Engine requests that failed.", m.request_errors);
  counter("prompt_tokens_total", "Prompt tokens of finished API requests.", m.prompt_tokens);
  counter("generation_tokens_total", "Generated tokens of finished API requests.",
          m.completion_tokens);

  auto per_client = [&](const char* name, const char* help, uint64_t ClientTokens::*field) {
    w.Header(name, "counter", help);
    for (const auto& [client, t] : m.clients)
      w.Sample(name, "client=\"" + LabelValue(client) + "\"", static_cast<double>(t.*field));
  };
  per_client("client_requests_total", "API requests by client.", &ClientTokens::requests);
  per_client("client_prompt_tokens_total", "Prompt tokens by client.",
             &ClientTokens::prompt_tokens);
  per_client("client_generation_tokens_total", "Generated tokens by client.",
             &ClientTokens::completion_tokens);

  struct EngineMetric {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const EngineStats&);
  };
  static const EngineMetric kEngine[] = {
      {"num_requests_running", "gauge", "Requests decoding in the engine.",
       [](const EngineStats& s) { return static_cast<double>(s.running); }},
      {"num_requests_waiting", "gauge", "Requests queued in the engine.",
       [](const EngineStats& s) { return static_cast<double>(s.waiting); }},
      {"kv_blocks_used", "gauge", "KV cache blocks in use.",
       [](const EngineStats& s) {
         return static_cast<double>(s.kv_blocks_total - s.kv_blocks_free);
       }},
      {"kv_blocks_free", "gauge", "KV cache blocks free.",
       [](const EngineStats& s) { return static_cast<double>(s.kv_blocks_free); }},
      // Blocks the prefix cache holds (some may also be held by running
      // requests). With nothing running or waiting, free + cached == total;
      // anything above is held by a request that has gone (a leak).
      {"kv_blocks_cached", "gauge", "KV cache blocks held by the prefix cache.",
       [](const EngineStats& s) { return static_cast<double>(s.kv_blocks_cached); }},
      {"kv_blocks_total", "gauge", "KV cache blocks in all.",
       [](const EngineStats& s) { return static_cast<double>(s.kv_blocks_total); }},
      {"kv_slides_total", "gauge",
       "KV slides in all: a hybrid model's sliding layers' share of blocks (0: none).",
       [](const EngineStats& s) { return static_cast<double>(s.kv_slides_total); }},
      {"kv_slides_taken_back_total", "counter",
       "KV slides taken back from cached blocks whose slide no window held.",
       [](const EngineStats& s) { return static_cast<double>(s.kv_slides_taken_back); }},
      {"kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0-1).",
       [](const EngineStats& s) {
         return s.kv_blocks_total > 0
                    ? static_cast<double>(s.kv_blocks_total - s.kv_blocks_free) / s.kv_blocks_total
                    : 0.0;
       }},
      {"prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
       [](const EngineStats& s) { return static_cast<double>(s.prompt_tokens); }},
      {"prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
       [](const EngineStats& s) { return static_cast<double>(s.cached_prompt_tokens); }},
      {"prefix_cache_host_hits_total", "counter",
       "Prompt tokens copied back from the host KV tier (--kv-host).",
       [](const EngineStats& s) { return static_cast<double>(s.host_prompt_tokens); }},
      {"kv_host_blocks_total", "gauge", "Host KV tier blocks in all (0: no tier).",
       [](const EngineStats& s) { return static_cast<double>(s.kv_host_blocks_total); }},
      {"kv_host_blocks_used", "gauge", "Host KV tier blocks holding a prefix's KV.",
       [](const EngineStats& s) { return static_cast<double>(s.kv_host_blocks_used); }},
      {"kv_host_bytes_in_total", "counter", "Bytes of KV copied back from the host tier.",
       [](const EngineStats& s) { return static_cast<double>(s.host_bytes_in); }},
      {"kv_host_bytes_out_total", "counter", "Bytes of evicted KV copied to the host tier.",
       [](const EngineStats& s) { return static_cast<double>(s.host_bytes_out); }},
      {"kv_host_copy_in_exposed_seconds_total", "counter",
       "Seconds of copies back from the host tier that a step waited for.",
       [](const EngineStats& s) { return s.host_in_exposed_seconds; }},
      {"kv_host_copy_in_hidden_seconds_total", "counter",
       "Seconds of prefetched copies back from the host tier done before the step that read "
       "them.",
       [](const EngineStats& s) { return s.host_in_hidden_seconds; }},
      {"kv_host_copy_out_seconds_total", "counter", "Seconds of copies to the host tier.",
       [](const EngineStats& s) { return s.host_out_seconds; }},
      {"kv_host_copy_failures_total", "counter",
       "Copies between the KV cache and the host tier that failed (recomputed instead).",
       [](const EngineStats& s) { return static_cast<double>(s.host_copy_failures); }},
      {"engine_preemptions_total", "counter", "Requests preempted (recomputed later).",
       [](const EngineStats& s) { return static_cast<double>(s.preemptions); }},
      {"spec_decode_num_draft_tokens_total", "counter",
       "Speculative decoding: guessed tokens checked.",
       [](const EngineStats& s) { return static_cast<double>(s.spec_proposed); }},
      {"spec_decode_num_accepted_tokens_total", "counter",
       "Speculative decoding: guessed tokens kept.",
       [](const EngineStats& s) { return static_cast<double>(s.spec_accepted); }},
      {"decode_passes_total", "counter",
       "Decode passes (a sequence's share of a step from its last token on).",
       [](const EngineStats& s) { return static_cast<double>(s.decode_passes); }},
      {"decode_pass_tokens_total", "counter",
       "Tokens decode passes produced (over decode_passes_total: tokens per target pass).",
       [](const EngineStats& s) { return static_cast<double>(s.decode_tokens_out); }},
      {"spec_decode_propose_seconds_total", "counter", "Seconds spent proposing guesses.",
       [](const EngineStats& s) { return s.propose_seconds; }},
      {"forward_seconds_total", "counter", "Seconds spent in forward passes.",
       [](const EngineStats& s) { return s.forward_seconds; }},
      {"decode_steps_total", "counter", "Steps that computed no prompt token (decode only).",
       [](const EngineStats& s) { return static_cast<double>(s.decode_steps); }},
      {"decode_step_seconds_total", "counter",
       "Seconds of the forward passes of steps that computed no prompt token.",
       [](const EngineStats& s) { return s.decode_step_seconds; }},
      {"decode_step_context_tokens_total", "counter",
       "Positions the decodes of steps that computed no prompt token attended.",
       [](const EngineStats& s) { return static_cast<double>(s.decode_step_context_tokens); }},
      {"cascade_passes_total", "counter",
       "Forward passes that attended a shared prefix once per group (cascade attention).",
       [](const EngineStats& s) { return static_cast<double>(s.cascade_passes); }},
      {"cascade_tokens_total", "counter", "Decode tokens whose shared prefix was attended so.",
       [](const EngineStats& s) { return static_cast<double>(s.cascade_tokens); }},
      {"cpu_pool_passes_total", "counter", "Parallel forward passes of the CPU thread pool.",
       [](const EngineStats& s) { return static_cast<double>(s.pool_passes); }},
      {"cpu_pool_narrowed_passes_total", "counter",
       "Of those, passes run on fewer threads while the machine was oversubscribed.",
       [](const EngineStats& s) { return static_cast<double>(s.pool_narrowed_passes); }},
  };
  for (const EngineMetric& e : kEngine) {
    w.Header(e.name, e.type, e.help);
    for (size_t i = 0; i < engines.size(); ++i)
      w.Sample(e.name, "engine=\"" + std::to_string(i) + "\"", e.value(engines[i]));
  }
  // Per engine and client: what fair sharing sees (EngineStats::clients).
  struct ClientMetric {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const EngineStats::ClientStats&);
  };
  static const ClientMetric kClient[] = {
      {"engine_client_waiting", "gauge", "Requests of the client queued in the engine.",
       [](const EngineStats::ClientStats& c) { return static_cast<double>(c.waiting); }},
      {"engine_client_running", "gauge", "Requests of the client running in the engine.",
       [](const EngineStats::ClientStats& c) { return static_cast<double>(c.running); }},
      {"engine_client_prompt_tokens_total", "counter",
       "Prompt tokens the engine computed for the client (cache hits excluded).",
       [](const EngineStats::ClientStats& c) { return static_cast<double>(c.prompt_tokens); }},
      {"engine_client_generated_tokens_total", "counter",
       "Tokens the engine generated for the client.",
       [](const EngineStats::ClientStats& c) { return static_cast<double>(c.generated_tokens); }},
      {"engine_client_vtc_counter", "gauge",
       "The client's virtual token counter under --fair (weighted service).",
       [](const EngineStats::ClientStats& c) { return c.counter; }},
  };
  for (const ClientMetric& e : kClient) {
    w.Header(e.name, e.type, e.help);
    for (size_t i = 0; i < engines.size(); ++i)
      for (const EngineStats::ClientStats& c : engines[i].clients)
        w.Sample(e.name,
                 "engine=\"" + std::to_string(i) + "\",client=\"" + LabelValue(c.client) + "\"",
                 e.value(c));
  }
  return w.Take();
}

}  // namespace braid::http
