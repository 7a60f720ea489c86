// The engines' figures over time for the dashboard: one sample a second
// (gauges, cumulative counters and the rates over the interval before it,
// per engine and per client), the last `capacity` of them kept, rendered as
// the JSON of GET /v1/stats (docs/http-api.md).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace braid::http {

// Runs the server holds, by state.
struct RunStateCounts {
  int queued = 0, running = 0, done = 0, failed = 0, cancelled = 0;
};

// An engine as the dashboard names it.
struct EngineLabel {
  std::string name;    // "engine0"
  std::string model;   // the model's path, or the remote server's URL
  std::string device;  // "cpu", "cuda:0", "remote"
};

// Thread-safe: a sampler thread records, handlers render.
class StatsHistory {
 public:
  StatsHistory(std::string model_name, std::vector<EngineLabel> engines, size_t capacity = 600);

  // One sample at `t_unix` (seconds): `engines` in the order of the labels.
  void Record(double t_unix, const std::vector<EngineStats>& engines, const RunStateCounts& runs);

  // {"model", "interval_ms", "seq", "engines": [labels], "samples": [...]}
  // with the samples newer than `since` (0: all kept), oldest first. With
  // `only_client`, each sample's "clients" holds that client's rows alone
  // (the engines' figures, totals over every client, stay): what a key that
  // may not see other clients gets.
  std::string Json(uint64_t since, const std::string* only_client = nullptr) const;

  // When the last sample was taken (0: none yet).
  double last_time() const;

 private:
  struct EngineSample {
    EngineStats stats;  // clients included
    double generated_per_s = 0, prompt_per_s = 0;
    double hit_rate = -1;  // cached / (prompt + cached) over the interval; -1: no prompt
  };
  struct ClientSample {
    std::string client;
    size_t engine = 0;
    EngineStats::ClientStats stats;
    double generated_per_s = 0;
  };
  struct Sample {
    uint64_t seq = 0;
    double t_unix = 0;
    RunStateCounts runs;
    std::vector<EngineSample> engines;
    std::vector<ClientSample> clients;
  };

  const std::string model_name_;
  const std::vector<EngineLabel> labels_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<Sample> samples_;
  uint64_t seq_ = 0;
};

}  // namespace braid::http
