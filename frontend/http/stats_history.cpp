#include "http/stats_history.h"

#include <map>
#include <nlohmann/json.hpp>
#include <utility>

namespace braid::http {

using nlohmann::json;

namespace {

// A counter's growth per second between two samples (0 when the clock did not move
// or the counter went back, as after an engine restart).
double Rate(uint64_t now, uint64_t before, double dt) {
  return dt > 0 && now >= before ? static_cast<double>(now - before) / dt : 0.0;
}

}  // namespace

StatsHistory::StatsHistory(std::string model_name, std::vector<EngineLabel> engines,
                           size_t capacity)
    : model_name_(std::move(model_name)),
      labels_(std::move(engines)),
      capacity_(capacity == 0 ? 1 : capacity) {}

void StatsHistory::Record(double t_unix, const std::vector<EngineStats>& engines,
                          const RunStateCounts& runs) {
  std::lock_guard<std::mutex> lock(mu_);
  Sample s;
  s.seq = ++seq_;
  s.t_unix = t_unix;
  s.runs = runs;
  const Sample* prev = samples_.empty() ? nullptr : &samples_.back();
  const double dt = prev ? t_unix - prev->t_unix : 0.0;
  // The previous sample's clients by (engine, name), for their rates.
  std::map<std::pair<size_t, std::string>, const ClientSample*> before;
  if (prev)
    for (const ClientSample& c : prev->clients) before[{c.engine, c.client}] = &c;
  for (size_t e = 0; e < engines.size(); ++e) {
    EngineSample es;
    es.stats = engines[e];
    es.stats.forward_stages.clear();  // not shown; can be large
    if (prev && e < prev->engines.size()) {
      const EngineStats& p = prev->engines[e].stats;
      es.generated_per_s = Rate(es.stats.generated_tokens, p.generated_tokens, dt);
      es.prompt_per_s = Rate(es.stats.prompt_tokens, p.prompt_tokens, dt);
      if (es.stats.prompt_tokens > p.prompt_tokens &&
          es.stats.cached_prompt_tokens >= p.cached_prompt_tokens)
        es.hit_rate = static_cast<double>(es.stats.cached_prompt_tokens - p.cached_prompt_tokens) /
                      static_cast<double>(es.stats.prompt_tokens - p.prompt_tokens);
    }
    for (const EngineStats::ClientStats& c : es.stats.clients) {
      ClientSample cs;
      cs.client = c.client;
      cs.engine = e;
      cs.stats = c;
      // A client not in the sample before had nothing then.
      if (prev) {
        auto it = before.find({e, c.client});
        cs.generated_per_s = Rate(c.generated_tokens,
                                  it != before.end() ? it->second->stats.generated_tokens : 0, dt);
      }
      s.clients.push_back(std::move(cs));
    }
    es.stats.clients.clear();  // kept once, in s.clients
    s.engines.push_back(std::move(es));
  }
  samples_.push_back(std::move(s));
  while (samples_.size() > capacity_) samples_.pop_front();
}

double StatsHistory::last_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_.empty() ? 0.0 : samples_.back().t_unix;
}

std::string StatsHistory::Json(uint64_t since, const std::string* only_client) const {
  json out;
  out["model"] = model_name_;
  out["interval_ms"] = 1000;
  json labels = json::array();
  for (const EngineLabel& l : labels_)
    labels.push_back({{"name", l.name}, {"model", l.model}, {"device", l.device}});
  out["engines"] = std::move(labels);
  json samples = json::array();
  std::lock_guard<std::mutex> lock(mu_);
  out["seq"] = seq_;
  for (const Sample& s : samples_) {
    if (s.seq <= since) continue;
    json engines = json::array();
    for (const EngineSample& e : s.engines) {
      const EngineStats& st = e.stats;
      engines.push_back({{"running", st.running},
                         {"waiting", st.waiting},
                         {"kv_blocks_used", st.kv_blocks_total - st.kv_blocks_free},
                         {"kv_blocks_total", st.kv_blocks_total},
                         {"kv_blocks_cached", st.kv_blocks_cached},
                         {"prompt_tokens", st.prompt_tokens},
                         {"cached_prompt_tokens", st.cached_prompt_tokens},
                         {"generated_tokens", st.generated_tokens},
                         {"requests_finished", st.requests_finished},
                         {"preemptions", st.preemptions},
                         {"generated_tokens_per_s", e.generated_per_s},
                         {"prompt_tokens_per_s", e.prompt_per_s},
                         {"prefix_hit_rate", e.hit_rate < 0 ? json(nullptr) : json(e.hit_rate)}});
    }
    json clients = json::array();
    for (const ClientSample& c : s.clients) {
      if (only_client && c.client != *only_client) continue;
      clients.push_back({{"client", c.client},
                         {"engine", c.engine < labels_.size() ? labels_[c.engine].name : ""},
                         {"prompt_tokens", c.stats.prompt_tokens},
                         {"generated_tokens", c.stats.generated_tokens},
                         {"waiting", c.stats.waiting},
                         {"running", c.stats.running},
                         {"counter", c.stats.counter},
                         {"generated_tokens_per_s", c.generated_per_s}});
    }
    samples.push_back({{"seq", s.seq},
                       {"t_unix", s.t_unix},
                       {"runs",
                        {{"queued", s.runs.queued},
                         {"running", s.runs.running},
                         {"done", s.runs.done},
                         {"failed", s.runs.failed},
                         {"cancelled", s.runs.cancelled}}},
                       {"engines", std::move(engines)},
                       {"clients", std::move(clients)}});
  }
  out["samples"] = std::move(samples);
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace braid::http
