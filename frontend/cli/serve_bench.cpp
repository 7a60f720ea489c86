// braid bench --serve: N concurrent requests against the serving engine,
// reporting aggregate throughput, time to first token and inter-token
// latency percentiles per concurrency level (optionally with a shared
// prompt prefix); or, with --rate, requests arriving as a Poisson process at
// given rates (the online-serving benchmark of SGLang and vLLM).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json_text.h"
#include "cli/model_options.h"
#include "cli/stack.h"
#include "engine/engine.h"
#include "engine/roofline.h"
#include "engine/system_probe.h"

namespace braid::cli {
namespace {

// Bounds of the sizes (documented in `braid bench --help`): concurrency up to
// the engine's largest batch of sequences; each request's parts up to 32 Ki
// tokens; and the KV cache of the largest level, which every request of it
// needs at once, up to 4 Mi tokens (as braid run's --kv-tokens).
constexpr int kMaxConcurrency = 4096;
constexpr long long kMaxRequestTokens = 32768;
constexpr long long kMaxKvTokens = 4LL << 20;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

// A comma-separated list of integers, each in [lo, hi]; a bad element is
// recorded on `args` (naming the option) and left out.
std::vector<int> ParseList(Args& args, const std::string& option, const std::string& s, int lo,
                           int hi) {
  std::vector<int> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    // One element at a time through Args, for the same checks and messages.
    const std::string item = s.substr(i, j - i);
    Args one({option, item});
    const long long v = one.Int({option.c_str()}, lo - 1LL, lo, hi);
    if (std::string e = one.Error(); !e.empty()) {
      args.Fail(e);
    } else {
      out.push_back(static_cast<int>(v));
    }
    i = j + 1;
  }
  return out;
}

// A greedy request of `prompt` followed by `random` random tokens, generating
// exactly max_tokens tokens (EOS ignored).
GenerationRequest Greedy(std::vector<int32_t> prompt, int random, int max_tokens,
                         std::uniform_int_distribution<int32_t>& pick, std::mt19937& rng) {
  GenerationRequest g;
  g.prompt = std::move(prompt);
  for (int k = 0; k < random; ++k) g.prompt.push_back(pick(rng));
  g.sampling = SamplingParams::Greedy();
  g.sampling.max_tokens = max_tokens;
  g.sampling.ignore_eos = true;
  return g;
}

struct LevelResult {
  int concurrency = 0;
  double wall_s = 0, gen_tok_s = 0, decode_tok_s = 0;
  double ttft_p50 = 0, ttft_p99 = 0, itl_p50 = 0, itl_p99 = 0;
  double cached_fraction = 0;
};

// One latency-class request alone, then the same request while `background`
// throughput-class requests run: its inter-token time in both cases and the
// ratio (the goal: <= 1.5x), with the background's aggregate throughput.
// With reps > 1 the pair runs that many times (a slow spell of a shared host
// then moves one pair, not the figure): a row per pair, and the median ratio.
int LatencyMix(Engine& engine, int background, int prompt_len, int gen_len, int reps,
               std::uniform_int_distribution<int32_t>& pick, std::mt19937& rng) {
  auto make = [&](GoalClass goal) {
    GenerationRequest g = Greedy({}, prompt_len, gen_len, pick, rng);
    g.goal = goal;
    return g;
  };
  auto mean_itl = [](const Completion& c) {
    double s = 0;
    for (double x : c.timings.inter_token_ms) s += x;
    return c.timings.inter_token_ms.empty() ? 0.0 : s / c.timings.inter_token_ms.size();
  };
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "braid bench: %s\n", s.message().c_str());
    return 1;
  };
  std::printf(
      "| pair | case | latency request ITL mean ms | p50 | p99 | other tokens/s during |\n");
  std::printf("| ---: | --- | ---: | ---: | ---: | ---: |\n");
  std::vector<double> ratios;
  for (int rep = 1; rep <= reps; ++rep) {
    auto alone = engine.Submit(make(GoalClass::kLatency));
    if (!alone.ok()) return fail(alone.status());
    const Completion a = (*alone)->Wait();
    // Background first, so the latency request joins a busy engine.
    std::vector<std::shared_ptr<RequestHandle>> bg;
    for (int i = 0; i < background; ++i) {
      GenerationRequest g = make(GoalClass::kThroughput);
      g.sampling.max_tokens = gen_len * 4;
      auto h = engine.Submit(g);
      if (!h.ok()) return fail(h.status());
      bg.push_back(*h);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto t0 = std::chrono::steady_clock::now();
    const EngineStats s0 = engine.stats();
    auto busy = engine.Submit(make(GoalClass::kLatency));
    if (!busy.ok()) return fail(busy.status());
    const Completion b = (*busy)->Wait();
    const EngineStats s1 = engine.stats();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto& h : bg) h->Cancel();
    for (auto& h : bg) h->Wait();
    const double gen_during = static_cast<double>(s1.generated_tokens - s0.generated_tokens);
    std::printf("| %d | alone | %.2f | %.2f | %.2f | - |\n", rep, mean_itl(a),
                Percentile(a.timings.inter_token_ms, 50), Percentile(a.timings.inter_token_ms, 99));
    std::printf("| %d | with %d throughput requests | %.2f | %.2f | %.2f | %.1f |\n", rep,
                background, mean_itl(b), Percentile(b.timings.inter_token_ms, 50),
                Percentile(b.timings.inter_token_ms, 99), (gen_during - b.tokens.size()) / secs);
    ratios.push_back(mean_itl(b) / mean_itl(a));
  }
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  std::printf("latency ITL with background / alone = %.2fx", sorted[sorted.size() / 2]);
  if (reps > 1) {
    std::printf(" (median of %d pairs:", reps);
    for (double r : ratios) std::printf(" %.2fx", r);
    std::printf(")");
  }
  std::printf(" (goal <= 1.5x)\n");
  return 0;
}

// --profile: the forward stages of a level's decode-only passes, summed over
// its repetitions (EngineStats::forward_stages, differences across each run;
// with profiling on every snapshot has the same stages and threads).
struct StageTotals {
  uint64_t passes = 0;
  std::vector<EngineStats::StageTime> stages;

  void Add(const EngineStats& before, const EngineStats& after) {
    passes += after.profiled_passes - before.profiled_passes;
    if (stages.empty()) stages = std::vector<EngineStats::StageTime>(after.forward_stages.size());
    for (size_t s = 0; s < stages.size(); ++s) {
      const auto& a = after.forward_stages[s];
      stages[s].stage = a.stage;
      stages[s].seconds.resize(a.seconds.size());
      for (size_t t = 0; t < a.seconds.size(); ++t)
        stages[s].seconds[t] += a.seconds[t] - before.forward_stages[s].seconds[t];
    }
  }

  // Per stage, ms per decode-only pass for each thread and its share of that thread's total.
  void Print(int concurrency) const {
    if (passes == 0 || stages.empty()) return;
    const size_t threads = stages.front().seconds.size();
    std::vector<double> total(threads, 0.0);
    for (const auto& s : stages)
      for (size_t t = 0; t < threads; ++t) total[t] += s.seconds[t];
    std::printf(
        "\nforward stages at %d concurrent, %llu decode-only passes: ms per pass (share) per "
        "thread\n",
        concurrency, static_cast<unsigned long long>(passes));
    for (const auto& s : stages) {
      std::printf("  %-28s", s.stage.c_str());
      for (size_t t = 0; t < threads; ++t)
        std::printf("  %7.3f (%4.1f%%)", 1e3 * s.seconds[t] / passes,
                    total[t] > 0 ? 100.0 * s.seconds[t] / total[t] : 0.0);
      std::printf("\n");
    }
    std::printf("  %-28s", "total");
    for (size_t t = 0; t < threads; ++t) std::printf("  %7.3f        ", 1e3 * total[t] / passes);
    std::printf("\n");
  }
};

// c concurrent requests of `prefix` + prompt_len random tokens, gen_len
// greedy tokens each: throughput, TTFT and inter-token percentiles.
Result<LevelResult> RunLevel(Engine& engine, int c, const std::vector<int32_t>& prefix,
                             int prompt_len, int gen_len,
                             std::uniform_int_distribution<int32_t>& pick, std::mt19937& rng) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<double> submitted_ms;  // each request's submission, from t0
  const auto t0 = std::chrono::steady_clock::now();
  auto since_t0 = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < c; ++i) {
    submitted_ms.push_back(since_t0());
    BRAID_ASSIGN_OR_RETURN(auto h, engine.Submit(Greedy(prefix, prompt_len, gen_len, pick, rng)));
    handles.push_back(h);
  }
  std::vector<double> ttft, itl;
  std::vector<std::vector<double>> token_ms(c);  // when each token came, from t0
  double generated = 0, cached = 0, prompt = 0;
  for (int i = 0; i < c; ++i) {
    Completion r = handles[i]->Wait();
    ttft.push_back(r.timings.ttft_ms);
    double at = submitted_ms[i] + r.timings.ttft_ms;
    token_ms[i].push_back(at);
    for (double gap : r.timings.inter_token_ms) token_ms[i].push_back(at += gap);
    itl.insert(itl.end(), r.timings.inter_token_ms.begin(), r.timings.inter_token_ms.end());
    generated += r.usage.generated_tokens;
    cached += r.usage.cached_tokens;
    prompt += r.usage.prompt_tokens;
  }
  LevelResult lr;
  lr.concurrency = c;
  lr.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lr.gen_tok_s = generated / lr.wall_s;
  // Decode rate at this concurrency: tokens that came while all c requests
  // were decoding (from the last first token to the first last token), over
  // that window's length.
  double from = 0, to = 1e300;
  for (const auto& t : token_ms) {
    from = std::max(from, t.front());
    to = std::min(to, t.back());
  }
  double in_window = 0;
  for (const auto& t : token_ms)
    in_window += static_cast<double>(std::upper_bound(t.begin(), t.end(), to) -
                                     std::upper_bound(t.begin(), t.end(), from));
  lr.decode_tok_s = to > from ? in_window / ((to - from) / 1000.0) : 0;
  lr.ttft_p50 = Percentile(ttft, 50);
  lr.ttft_p99 = Percentile(ttft, 99);
  lr.itl_p50 = Percentile(itl, 50);
  lr.itl_p99 = Percentile(itl, 99);
  lr.cached_fraction = prompt > 0 ? cached / prompt : 0;
  return lr;
}

// --rate: a list of request rates (requests/s), or "inf" for all at once
// (0 here); a bad element is recorded on `args`.
std::vector<double> ParseRates(Args& args, const std::string& s) {
  std::vector<double> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    if (item == "inf") {
      out.push_back(0);
    } else {
      Args one({"--rate", item});
      const double v = one.Num({"--rate"}, -1, 0.01, 100000);
      if (std::string e = one.Error(); !e.empty()) {
        args.Fail(e + " (or 'inf')");
      } else {
        out.push_back(v);
      }
    }
    i = j + 1;
  }
  return out;
}

struct RateResult {
  double rate = 0;  // requests/s asked for; 0 = all at once
  int requests = 0;
  double wall_s = 0, out_tok_s = 0, in_tok_s = 0, req_s = 0;
  double ttft_mean = 0, ttft_p50 = 0, ttft_p99 = 0;
  double itl_mean = 0, itl_p50 = 0, itl_p99 = 0;
  double e2e_p50 = 0, e2e_p99 = 0;
  uint64_t preemptions = 0;
  // Engine steps and the share of the wall time spent in forward passes
  // (the rest: scheduling, sampling, streaming, idle between arrivals).
  uint64_t steps = 0;
  double forward_share = 0;
  // Steps that computed no prompt token, the tokens they produced and their
  // forward seconds: the decode-only rate beside the whole run's.
  uint64_t decode_steps = 0, decode_step_tokens = 0, decode_step_context = 0;
  double decode_step_s = 0;
  // Those steps' roofline (DecodeStepsRoofline; 0: no bandwidth measured)
  // and whether the products rather than the weights' read bound it.
  double decode_step_roofline_s = 0;
  bool decode_step_products_bound = false;
  double cached_share = 0;  // of the prompt tokens, those found in the prefix cache
  // The KV tiers (EngineStats): prompt tokens found on the device, copied
  // back from the host tier, and computed; the copies each way.
  uint64_t device_hits = 0, host_hits = 0, computed = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  double in_exposed_s = 0, in_hidden_s = 0, out_s = 0;
  bool tier = false;
  // TTFT p50 (ms) and count of the requests whose prompt came mostly from
  // the device's cache, from the host tier, or was mostly computed.
  double ttft_device = 0, ttft_host = 0, ttft_computed = 0;
  int n_device = 0, n_host = 0, n_computed = 0;
  // With several clients (--clients): each one's service (w_p x prompt
  // tokens computed + w_q x tokens generated, 1 and 2) per window of the
  // run, windows where every client had a request pending, and over those
  // the largest and mean difference between clients' service per window.
  struct Client {
    int requests = 0;
    double service = 0;
    std::vector<double> per_window;
  };
  std::vector<Client> clients;
  double window_s = 0;
  std::vector<bool> contended;  // per window: every client had work pending throughout
  double diff_max = 0, diff_mean = 0;
};

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

// A grant of service to a client: when (s from the start), to whom, how
// much (w_p x prompt tokens computed + w_q x tokens generated, 1 and 2).
struct ServiceEvent {
  double at;
  int client;
  double amount;
};

// Each client's service per window of the run (20 windows over rr->wall_s),
// the windows where every client had a request pending throughout
// (submitted before, finished after), and over those the largest and mean
// difference between clients' service. client_of[i] and pending[i]: request
// i's client and its (submitted, finished) span.
void ClientWindows(size_t clients, const std::vector<int>& client_of,
                   const std::vector<ServiceEvent>& events,
                   const std::vector<std::pair<double, double>>& pending, RateResult* rr) {
  const int windows = 20;
  const size_t n = client_of.size();
  rr->window_s = rr->wall_s / windows;
  rr->clients.assign(clients, {});
  for (auto& c : rr->clients) c.per_window.assign(windows, 0);
  for (size_t i = 0; i < n; ++i) rr->clients[client_of[i]].requests++;
  for (const ServiceEvent& e : events) {
    const int w = std::min(windows - 1, static_cast<int>(e.at / rr->window_s));
    rr->clients[e.client].per_window[w] += e.amount;
    rr->clients[e.client].service += e.amount;
  }
  double sum = 0;
  int count = 0;
  for (int w = 0; w < windows; ++w) {
    const double a = w * rr->window_s, b = a + rr->window_s;
    bool all = true;
    for (size_t c = 0; c < clients; ++c) {
      bool busy = false;
      for (size_t i = 0; i < n && !busy; ++i)
        busy =
            client_of[i] == static_cast<int>(c) && pending[i].first <= a && pending[i].second >= b;
      all &= busy;
    }
    rr->contended.push_back(all);
    if (!all) continue;
    double lo = 1e300, hi = 0;
    for (const auto& c : rr->clients) {
      lo = std::min(lo, c.per_window[w]);
      hi = std::max(hi, c.per_window[w]);
    }
    rr->diff_max = std::max(rr->diff_max, hi - lo);
    sum += hi - lo;
    ++count;
  }
  rr->diff_mean = count ? sum / count : 0;
}

// n requests arriving as a Poisson process at `rate` (0: all at once), each
// a random prompt of uniform length in [ratio x prompt_len, prompt_len]
// generating a uniform [ratio x gen_len, gen_len] greedy tokens, after its
// client's own `shared` prefix tokens (a system prompt per client). The
// workload (lengths, arrival gaps, tokens) comes from a fixed seed, so every
// rate serves the same requests.
Result<RateResult> RunRate(Engine& engine, double rate, int n, int prompt_len, int gen_len,
                           double ratio, int shared, int n_vocab,
                           const std::vector<double>& shares) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(100, n_vocab - 1);
  std::uniform_int_distribution<int> plen(std::max(1, static_cast<int>(ratio * prompt_len)),
                                          prompt_len);
  std::uniform_int_distribution<int> glen(std::max(1, static_cast<int>(ratio * gen_len)), gen_len);
  std::exponential_distribution<double> gap(rate > 0 ? rate : 1.0);
  // Each request's client drawn by the clients' shares of the rate (one
  // Poisson process split at random is one per client at those rates).
  std::discrete_distribution<int> who(shares.begin(), shares.end());
  std::vector<std::vector<int32_t>> prefixes(shares.size());
  for (auto& p : prefixes)
    for (int k = 0; k < shared; ++k) p.push_back(pick(rng));
  std::vector<GenerationRequest> requests;
  std::vector<double> arrival_s;
  std::vector<int> client_of;
  double at = 0;
  for (int i = 0; i < n; ++i) {
    const int p = plen(rng), g = glen(rng);
    client_of.push_back(shares.size() > 1 ? who(rng) : 0);
    requests.push_back(Greedy(prefixes[client_of.back()], p, g, pick, rng));
    if (shares.size() > 1) requests.back().client = "client" + std::to_string(client_of.back());
    arrival_s.push_back(at);
    if (rate > 0) at += gap(rng);
  }
  const EngineStats before = engine.stats();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<double> submitted_s;
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration<double>(arrival_s[i]));
    submitted_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    BRAID_ASSIGN_OR_RETURN(auto h, engine.Submit(std::move(requests[i])));
    handles.push_back(h);
  }
  std::vector<double> ttft, itl, e2e;
  std::vector<double> by_source[3];  // TTFT: mostly device-cached, host-cached, computed
  double generated = 0, prompt = 0, cached = 0, end_s = 0;
  // Service events and each request's pending span.
  std::vector<ServiceEvent> events;
  std::vector<std::pair<double, double>> pending(n);
  for (int i = 0; i < n; ++i) {
    const Completion r = handles[i]->Wait();
    if (r.finish_reason == "error" || r.finish_reason == "cancelled")
      return Status::Internal("request " + std::to_string(i) + " ended with '" + r.finish_reason +
                              "'");
    double t = submitted_s[i] + r.timings.ttft_ms / 1000.0;
    events.push_back({t, client_of[i], 1.0 * (r.usage.prompt_tokens - r.usage.cached_tokens) + 2});
    for (double gap_ms : r.timings.inter_token_ms)
      events.push_back({t += gap_ms / 1000.0, client_of[i], 2});
    pending[i] = {submitted_s[i], submitted_s[i] + r.timings.total_ms / 1000.0};
    ttft.push_back(r.timings.ttft_ms);
    const int half = r.usage.prompt_tokens / 2;
    by_source[r.usage.cached_tokens > half ? 0
              : r.usage.host_tokens > half ? 1
                                           : 2]
        .push_back(r.timings.ttft_ms);
    itl.insert(itl.end(), r.timings.inter_token_ms.begin(), r.timings.inter_token_ms.end());
    e2e.push_back(r.timings.total_ms);
    end_s = std::max(end_s, submitted_s[i] + r.timings.total_ms / 1000.0);
    generated += r.usage.generated_tokens;
    prompt += r.usage.prompt_tokens;
    cached += r.usage.cached_tokens;
  }
  RateResult rr;
  rr.rate = rate;
  rr.requests = n;
  rr.wall_s = end_s;
  rr.out_tok_s = generated / end_s;
  rr.in_tok_s = prompt / end_s;
  rr.req_s = n / end_s;
  rr.cached_share = prompt > 0 ? cached / prompt : 0;
  rr.ttft_mean = Mean(ttft);
  rr.ttft_p50 = Percentile(ttft, 50);
  rr.ttft_p99 = Percentile(ttft, 99);
  rr.itl_mean = Mean(itl);
  rr.itl_p50 = Percentile(itl, 50);
  rr.itl_p99 = Percentile(itl, 99);
  rr.e2e_p50 = Percentile(e2e, 50);
  rr.e2e_p99 = Percentile(e2e, 99);
  const EngineStats after = engine.stats();
  rr.preemptions = after.preemptions - before.preemptions;
  rr.steps = after.steps - before.steps;
  rr.forward_share = (after.forward_seconds - before.forward_seconds) / end_s;
  rr.decode_steps = after.decode_steps - before.decode_steps;
  rr.decode_step_tokens = after.decode_step_tokens - before.decode_step_tokens;
  rr.decode_step_s = after.decode_step_seconds - before.decode_step_seconds;
  rr.decode_step_context = after.decode_step_context_tokens - before.decode_step_context_tokens;
  rr.tier = after.kv_host_blocks_total > 0;
  rr.n_device = static_cast<int>(by_source[0].size());
  rr.n_host = static_cast<int>(by_source[1].size());
  rr.n_computed = static_cast<int>(by_source[2].size());
  rr.ttft_device = Percentile(by_source[0], 50);
  rr.ttft_host = Percentile(by_source[1], 50);
  rr.ttft_computed = Percentile(by_source[2], 50);
  rr.device_hits = after.cached_prompt_tokens - before.cached_prompt_tokens;
  rr.host_hits = after.host_prompt_tokens - before.host_prompt_tokens;
  rr.computed = (after.prompt_tokens - before.prompt_tokens) - rr.device_hits - rr.host_hits;
  rr.bytes_in = after.host_bytes_in - before.host_bytes_in;
  rr.bytes_out = after.host_bytes_out - before.host_bytes_out;
  rr.in_exposed_s = after.host_in_exposed_seconds - before.host_in_exposed_seconds;
  rr.in_hidden_s = after.host_in_hidden_seconds - before.host_in_hidden_seconds;
  rr.out_s = after.host_out_seconds - before.host_out_seconds;
  if (shares.size() > 1) ClientWindows(shares.size(), client_of, events, pending, &rr);
  return rr;
}

// One rate's row of the table; with several clients, each one's service
// and the difference between them.
void PrintRateRow(const RateResult& x, const std::string& policy,
                  const std::vector<double>& shares) {
  char label[32];
  std::snprintf(label, sizeof label, x.rate > 0 ? "%g" : "inf", x.rate);
  std::printf(
      "| %s | %d | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | "
      "%.2f | %llu | %llu | %.0f%% |\n",
      label, x.requests, x.wall_s, x.out_tok_s, x.in_tok_s, x.req_s, x.ttft_mean, x.ttft_p50,
      x.ttft_p99, x.itl_mean, x.itl_p50, x.itl_p99, x.e2e_p50 / 1000, x.e2e_p99 / 1000,
      static_cast<unsigned long long>(x.preemptions), static_cast<unsigned long long>(x.steps),
      100 * x.forward_share);
  std::printf(
      "  prompt tokens: %llu on the device, %llu from the host tier, %llu computed; copied "
      "in %.1f MB (%.3f s waited for, %.3f s prefetched), out %.1f MB (%.3f s)\n",
      static_cast<unsigned long long>(x.device_hits), static_cast<unsigned long long>(x.host_hits),
      static_cast<unsigned long long>(x.computed), x.bytes_in / 1e6, x.in_exposed_s, x.in_hidden_s,
      x.bytes_out / 1e6, x.out_s);
  std::printf(
      "  TTFT p50 of requests whose prompt came mostly from the device cache %.1f ms (%d), "
      "the host tier %.1f ms (%d), computed %.1f ms (%d)\n",
      x.ttft_device, x.n_device, x.ttft_host, x.n_host, x.ttft_computed, x.n_computed);
  const double rest_s = x.forward_share * x.wall_s - x.decode_step_s;
  std::printf(
      "  steps with no prompt token: %llu of %llu, %.2f s of forward passes, %.1f tok/s in "
      "them (%.1f ms a step); steps with prompt tokens: %.2f s\n",
      static_cast<unsigned long long>(x.decode_steps), static_cast<unsigned long long>(x.steps),
      x.decode_step_s, x.decode_step_s > 0 ? x.decode_step_tokens / x.decode_step_s : 0.0,
      x.decode_steps > 0 ? 1e3 * x.decode_step_s / x.decode_steps : 0.0, rest_s);
  if (x.decode_step_roofline_s > 0 && x.decode_steps > 0)
    std::printf(
        "  their roofline (a step reads the weights once, or computes its products at the "
        "GEMM rate where that is slower, and reads each decode's KV once): %.2f ms a step at "
        "%.1f sequences and %.0f tokens of KV a step, %s; reached: %.1f%%\n",
        1e3 * x.decode_step_roofline_s / x.decode_steps,
        static_cast<double>(x.decode_step_tokens) / x.decode_steps,
        static_cast<double>(x.decode_step_context) / x.decode_steps,
        x.decode_step_products_bound ? "the products slower than the weights' read"
                                     : "the weights' read slower than the products",
        100 * x.decode_step_roofline_s / x.decode_step_s);
  if (x.clients.empty()) return;
  std::printf(
      "  policy %s, %zu clients, %.0f%% of prompt tokens cached; service (1 x prompt tokens "
      "computed + 2 x generated)",
      policy.c_str(), x.clients.size(), 100 * x.cached_share);
  for (size_t c = 0; c < x.clients.size(); ++c)
    std::printf("%s client%zu (share %g): %d requests, %.0f (%.1f/s)", c ? ";" : ":", c, shares[c],
                x.clients[c].requests, x.clients[c].service, x.clients[c].service / x.wall_s);
  int contended = 0;
  for (bool b : x.contended) contended += b;
  std::printf(
      "\n  difference in service per %.2f s window, over the %d of %zu windows where every "
      "client waited: max %.0f, mean %.0f\n",
      x.window_s, contended, x.contended.size(), x.diff_max, x.diff_mean);
}

// One rate's JSON object (after `sep`) into f.
void WriteRateJson(FILE* f, const char* sep, const RateResult& x,
                   const std::vector<double>& shares) {
  std::fprintf(f,
               "%s\n  {\"rate\": %.3f, \"requests\": %d, \"wall_s\": %.3f, \"out_tok_s\": %.2f, "
               "\"in_tok_s\": %.2f, \"req_s\": %.4f, \"ttft_mean_ms\": %.2f, \"ttft_p50_ms\": "
               "%.2f, \"ttft_p99_ms\": %.2f, \"itl_mean_ms\": %.3f, \"itl_p50_ms\": %.3f, "
               "\"itl_p99_ms\": %.3f, \"e2e_p50_ms\": %.1f, \"e2e_p99_ms\": %.1f, "
               "\"preemptions\": %llu, \"steps\": %llu, \"forward_share\": %.4f, "
               "\"cached_share\": %.4f, \"decode_steps\": %llu, \"decode_step_tokens\": %llu, "
               "\"decode_step_s\": %.4f, \"decode_step_context_tokens\": %llu, "
               "\"decode_step_roofline_s\": %.4f, \"decode_step_products_bound\": %s",
               sep, x.rate, x.requests, x.wall_s, x.out_tok_s, x.in_tok_s, x.req_s, x.ttft_mean,
               x.ttft_p50, x.ttft_p99, x.itl_mean, x.itl_p50, x.itl_p99, x.e2e_p50, x.e2e_p99,
               static_cast<unsigned long long>(x.preemptions),
               static_cast<unsigned long long>(x.steps), x.forward_share, x.cached_share,
               static_cast<unsigned long long>(x.decode_steps),
               static_cast<unsigned long long>(x.decode_step_tokens), x.decode_step_s,
               static_cast<unsigned long long>(x.decode_step_context), x.decode_step_roofline_s,
               x.decode_step_products_bound ? "true" : "false");
  std::fprintf(
      f,
      ", \"device_hit_tokens\": %llu, \"host_hit_tokens\": %llu, \"computed_tokens\": "
      "%llu, \"host_bytes_in\": %llu, \"host_bytes_out\": %llu, "
      "\"host_in_exposed_s\": %.4f, \"host_in_hidden_s\": %.4f, \"host_out_s\": %.4f, "
      "\"ttft_p50_device_ms\": %.2f, \"n_device\": %d, \"ttft_p50_host_ms\": %.2f, "
      "\"n_host\": %d, \"ttft_p50_computed_ms\": %.2f, \"n_computed\": %d",
      static_cast<unsigned long long>(x.device_hits), static_cast<unsigned long long>(x.host_hits),
      static_cast<unsigned long long>(x.computed), static_cast<unsigned long long>(x.bytes_in),
      static_cast<unsigned long long>(x.bytes_out), x.in_exposed_s, x.in_hidden_s, x.out_s,
      x.ttft_device, x.n_device, x.ttft_host, x.n_host, x.ttft_computed, x.n_computed);
  if (!x.clients.empty()) {
    std::fprintf(f,
                 ", \"window_s\": %.4f, \"diff_max\": %.1f, \"diff_mean\": %.1f, \"contended\": [",
                 x.window_s, x.diff_max, x.diff_mean);
    for (size_t w = 0; w < x.contended.size(); ++w)
      std::fprintf(f, "%s%s", w ? ", " : "", x.contended[w] ? "true" : "false");
    std::fprintf(f, "], \"clients\": [");
    for (size_t c = 0; c < x.clients.size(); ++c) {
      std::fprintf(f, "%s{\"share\": %g, \"requests\": %d, \"service\": %.1f, \"per_window\": [",
                   c ? ", " : "", shares[c], x.clients[c].requests, x.clients[c].service);
      for (size_t w = 0; w < x.clients[c].per_window.size(); ++w)
        std::fprintf(f, "%s%.1f", w ? ", " : "", x.clients[c].per_window[w]);
      std::fprintf(f, "]}");
    }
    std::fprintf(f, "]");
  }
  std::fprintf(f, "}");
}

// The --rate mode: one row per rate, and the JSON file if asked.
int RateMain(Engine& engine, int block_size, const std::vector<double>& rates, int n,
             int prompt_len, int gen_len, double ratio, int shared,
             const std::vector<double>& shares, const std::string& policy, double locality_bound,
             double cached_weight, int max_running, const std::string& cpu,
             const std::string& json) {
  const ModelInfo& info = engine.model()->info();
  const EngineStats st = engine.stats();
  std::printf("device: %s; KV pool %d tokens (%.1f GB)", info.device.c_str(),
              st.kv_blocks_total * block_size, st.kv_pool_bytes / 1e9);
  if (st.kv_slides_total > 0)
    std::printf(", the sliding layers' in %d slides of %d tokens", st.kv_slides_total, block_size);
  std::printf("\n");
  // The decode-only steps' roofline: a GPU's device copy bandwidth (bytes
  // read + written), the CPU's streaming read bandwidth; the weights read
  // per token and the pool's bytes per token of KV.
  const bool gpu = info.device.rfind("cuda", 0) == 0;
  const double bw =
      gpu ? MeasureDeviceCopyBandwidth(info.device) : MeasureReadBandwidth(info.threads);
  // And the rate of their products: a GPU's bf16 GEMM rate on a large
  // product, the CPU's int8 dot-product peak (its batched matmuls' limit);
  // 2 operations a parameter and sequence, the embedding table left out
  // (a tied head's products with it: a lower bound either way), the
  // attention's left out.
  const double peak = gpu ? MeasureDeviceGemmRate(info.device) : MeasureInt8GemmPeak(info.threads);
  const double ops_per_seq =
      2.0 * std::max(0.0, static_cast<double>(info.n_params) -
                              static_cast<double>(info.n_vocab) * info.n_embd);
  const double kv_per_token =
      st.kv_blocks_total > 0
          ? st.kv_pool_bytes / (static_cast<double>(st.kv_blocks_total) * block_size)
          : 0;
  std::printf(
      "roofline of the decode-only steps: %.1f MB of weights and %.1f KB of KV a token of "
      "context, at %.1f GB/s (%s); products of %.2f G operations a sequence at %.2f T operations/s "
      "(%s)\n",
      info.bytes_per_token / 1e6, kv_per_token / 1e3, bw / 1e9,
      gpu ? "device copy bandwidth" : "read bandwidth", ops_per_seq / 1e9, peak / 1e12,
      gpu ? "bf16 GEMM of 4096 x 4096 x 8192" : "int8 dot-product peak");
  std::printf(
      "| rate req/s | requests | wall s | out tok/s | in tok/s | req/s | TTFT mean ms | p50 | p99 "
      "| ITL mean ms | p50 | p99 | E2E p50 s | p99 | preemptions | steps | forward |\n");
  std::printf(
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
      "| ---: | ---: | ---: | ---: |\n");
  // One request of the workload's size first, outside the figures: what a
  // backend does at first use (GEMM plans, kernel choices) is not served
  // traffic.
  {
    std::mt19937 rng(99);
    std::uniform_int_distribution<int32_t> pick(100, info.n_vocab - 1);
    auto h = engine.Submit(Greedy({}, prompt_len, std::min(gen_len, 16), pick, rng));
    if (!h.ok()) {
      std::fprintf(stderr, "braid bench: %s\n", h.status().message().c_str());
      return 1;
    }
    (*h)->Wait();
  }
  std::vector<RateResult> results;
  for (double rate : rates) {
    auto r = RunRate(engine, rate, n, prompt_len, gen_len, ratio, shared, info.n_vocab, shares);
    if (!r.ok()) {
      std::fprintf(stderr, "braid bench: %s\n", r.status().message().c_str());
      return 1;
    }
    const DecodeRoofline roof = DecodeStepsRoofline(
        r->decode_steps, r->decode_step_tokens, r->decode_step_context,
        static_cast<double>(info.bytes_per_token), kv_per_token, bw, ops_per_seq, peak);
    r->decode_step_roofline_s = roof.seconds;
    r->decode_step_products_bound = roof.products_bound;
    PrintRateRow(*r, policy, shares);
    std::fflush(stdout);
    results.push_back(*r);
  }
  if (json.empty()) return 0;
  FILE* f = std::fopen(json.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "braid bench: cannot write '%s'\n", json.c_str());
    return 1;
  }
  std::fprintf(f,
               "{\"model\": \"%s\", \"device\": \"%s\", \"cpu\": \"%s\", \"prompt_len\": %d, "
               "\"gen_len\": %d, \"random_ratio\": %.3f, \"client_prefix\": %d, "
               "\"kv_pool_tokens\": %d, \"policy\": \"%s\", \"locality_bound\": %g, "
               "\"cached_weight\": %g, \"max_running\": %d, \"rates\": [",
               JsonEscape(info.path).c_str(), JsonEscape(info.device).c_str(),
               JsonEscape(cpu).c_str(), prompt_len, gen_len, ratio, shared,
               st.kv_blocks_total * block_size, JsonEscape(policy).c_str(), locality_bound,
               cached_weight, max_running);
  for (size_t i = 0; i < results.size(); ++i) WriteRateJson(f, i ? "," : "", results[i], shares);
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
  return 0;
}

// braid bench --serve's options, parsed.
struct ServeBenchOptions {
  ModelOptions model;
  std::vector<int> levels;  // -c: concurrency levels
  int prompt_len = 256, gen_len = 128, shared = 0;
  int batch_tokens = 0;
  std::string json;  // --json PATH
  int latency_mix = 0, latency_tokens = 0;
  bool rate_mode = false;  // --rate given
  std::vector<double> rates;
  int requests = 200;
  double ratio = 1.0;
  int max_running = 0;
  double kv_reserve = 0.5;
  int rate_kv_tokens = 0;
  int64_t kv_host_bytes = 0;   // --kv-host
  bool kv_slides = true;       // --kv-slides
  double step_ms = 0;          // --step-ms
  std::vector<double> shares;  // --clients
  std::string policy = "fcfs";
  double locality_bound = 0, cached_weight = 0;
  int reps = 1;
  bool profile = false;
  SpecOptions spec;
};

// The command line into *o. Returns 2 (said on stderr) for a bad option,
// or -1 to go on.
int ReadServeBenchOptions(Args& args, ServeBenchOptions* o) {
  o->model = ReadModelOptions(args);
  o->model.require_tokenizer = false;  // prompts are random token ids
  const std::string level_list = args.Str({"-c", "--concurrency"}, "1,4,16,64");
  o->levels = ParseList(args, "-c", level_list, 1, kMaxConcurrency);
  o->prompt_len = static_cast<int>(args.Int({"--prompt-len"}, 256, 1, kMaxRequestTokens));
  o->gen_len = static_cast<int>(args.Int({"--gen-len"}, 128, 1, kMaxRequestTokens));
  o->shared = static_cast<int>(args.Int({"--shared-prefix"}, 0, 0, kMaxRequestTokens));
  o->batch_tokens = static_cast<int>(args.Int({"--batch-tokens"}, 0, 0, 2048));
  o->json = args.Str({"--json"}, "");
  o->latency_mix = static_cast<int>(args.Int({"--latency-mix"}, 0, 0, 256));
  o->latency_tokens = static_cast<int>(args.Int({"--latency-batch-tokens"}, 0, 0, 2048));
  o->rate_mode = args.Has({"--rate"});
  o->rates = ParseRates(args, args.Str({"--rate"}, "inf"));
  o->requests = static_cast<int>(args.Int({"--requests"}, 200, 1, 100000));
  o->ratio = args.Num({"--random-ratio"}, 1.0, 0.0, 1.0);
  o->max_running = static_cast<int>(args.Int({"--max-running"}, 0, 0, kMaxConcurrency));
  o->kv_reserve = args.Num({"--kv-reserve"}, 0.5, 0, 1);
  o->rate_kv_tokens = static_cast<int>(args.Int({"--kv-tokens"}, 0, 0, kMaxKvTokens));
  if (auto host = ParseKvHost(args.Str({"--kv-host"}, "off")); host.ok())
    o->kv_host_bytes = *host;
  else
    args.Fail("option --kv-host: " + host.status().message());
  const std::string slides = args.Str({"--kv-slides"}, "on");
  if (slides != "on" && slides != "off")
    args.Fail("option --kv-slides: '" + slides + "' is not on or off");
  o->kv_slides = slides == "on";
  o->step_ms = args.Num({"--step-ms"}, 0, 0, 1e6);
  for (int share : ParseList(args, "--clients", args.Str({"--clients"}, "1"), 1, 1000))
    o->shares.push_back(share);
  o->policy = args.Str({"--policy"}, "fcfs");
  o->locality_bound = args.Num({"--locality-bound"}, 0, 0, 1e9);
  o->cached_weight = args.Num({"--cached-weight"}, 0, 0, 1e6);
  o->reps = static_cast<int>(args.Int({"-r", "--reps"}, 1, 1, 1000));
  o->profile = args.Flag({"--profile"});
  auto spec = ParseSpecOptions(args.Str({"--spec"}, "off"));
  if (!spec.ok()) {
    std::fprintf(stderr, "braid bench --serve: %s\n", spec.status().message().c_str());
    return 2;
  }
  o->spec = *spec;
  if (std::string e = args.Error(); !e.empty()) {
    std::fprintf(stderr, "braid bench --serve: %s\n", e.c_str());
    return 2;
  }
  if (o->levels.empty() || o->rates.empty()) {
    std::fprintf(stderr, "braid bench --serve: option %s: nothing to run\n",
                 o->levels.empty() ? "-c" : "--rate");
    return 2;
  }
  return -1;
}

// The --rate mode: an engine for the workload, then RateMain.
int RateBench(const ServeBenchOptions& o) {
  const long long context = static_cast<long long>(o.shared) + o.prompt_len + o.gen_len + 16;
  if (context > kMaxContext) {
    std::fprintf(stderr,
                 "braid bench --serve: --shared-prefix %d, --prompt-len %d and --gen-len %d "
                 "need a context of %lld; the limit is %lld\n",
                 o.shared, o.prompt_len, o.gen_len, context, kMaxContext);
    return 2;
  }
  const HostCpuSummary cpu = DescribeHostCpu();
  std::printf("cpu: %s; usable: %s\n", cpu.line.c_str(), DescribeUsableCpus().c_str());
  EngineOptions eo;
  eo.model = o.model;
  eo.model.context = static_cast<int>(context);
  eo.kv_tokens = o.rate_kv_tokens;
  eo.kv_host_bytes = o.kv_host_bytes;
  eo.kv_slides = o.kv_slides;
  eo.max_running = o.max_running;
  eo.max_batch_tokens = o.batch_tokens;
  eo.step_ms = o.step_ms;
  eo.max_waiting = o.requests;
  eo.kv_growth_reserve = o.kv_reserve;
  eo.policy = o.policy;
  eo.fairness.locality_bound = o.locality_bound;
  eo.fairness.cached_weight = o.cached_weight;
  eo.spec = o.spec;
  auto opened = Engine::Open(eo);
  if (!opened.ok()) {
    std::fprintf(stderr, "braid: %s\n", opened.status().message().c_str());
    return 1;
  }
  return RateMain(**opened, eo.block_size, o.rates, o.requests, o.prompt_len, o.gen_len, o.ratio,
                  o.shared, o.shares, o.policy, o.locality_bound, o.cached_weight, o.max_running,
                  cpu.model, o.json);
}

// The engine of the concurrency levels: a context for the longest request
// and the KV cache every request of the largest level needs at once, in 64
// bits (the bounds on the options keep it well inside them, not inside an
// int). Null (said on stderr) when that passes the limits.
std::optional<EngineOptions> LevelEngineOptions(const ServeBenchOptions& o) {
  const long long max_c = *std::max_element(o.levels.begin(), o.levels.end());
  const long long context =
      o.shared + o.prompt_len + o.gen_len * (o.latency_mix > 0 ? 4LL : 1LL) + 16;
  const long long kv_tokens = std::max(max_c, o.latency_mix + 2LL) * (context + 32) + 1024;
  if (context > kMaxContext || kv_tokens > kMaxKvTokens) {
    std::fprintf(stderr,
                 "braid bench --serve: -c %lld with --shared-prefix %d, --prompt-len %d and "
                 "--gen-len %d needs a context of %lld and %lld KV tokens; the limits are %lld "
                 "and %lld\n",
                 max_c, o.shared, o.prompt_len, o.gen_len, context, kv_tokens, kMaxContext,
                 kMaxKvTokens);
    return std::nullopt;
  }
  EngineOptions eo;
  eo.model = o.model;
  eo.model.cpu.profile_stages = o.profile;
  eo.model.context = static_cast<int>(context);
  eo.kv_tokens = static_cast<int>(kv_tokens);
  eo.max_running = static_cast<int>(max_c);
  eo.max_batch_tokens = o.batch_tokens;
  eo.policy = o.latency_mix > 0 ? "priority" : "fcfs";
  eo.latency_batch_tokens = o.latency_tokens;
  eo.step_ms = o.step_ms;
  eo.spec = o.spec;
  return eo;
}

// Every level `reps` times, and what was measured beside them.
struct LevelRuns {
  std::vector<std::vector<LevelResult>> runs;  // per level, per repetition
  // With several repetitions, the host's state after each (whether the
  // cores share a last-level cache moves every ratio; "The host",
  // docs/benchmarks.md).
  std::vector<CrossCoreRates> host;
  std::vector<StageTotals> stages;  // per level, with --profile
};

// The levels take turns (so that a slow spell of a shared host falls on all
// of them).
Result<LevelRuns> RunLevels(Engine& engine, const ServeBenchOptions& o,
                            const std::vector<int32_t>& prefix,
                            std::uniform_int_distribution<int32_t>& pick, std::mt19937& rng) {
  const int threads = engine.model()->info().threads;
  LevelRuns lr;
  lr.runs.resize(o.levels.size());
  lr.stages.resize(o.levels.size());
  for (int rep = 0; rep < o.reps; ++rep) {
    for (size_t i = 0; i < o.levels.size(); ++i) {
      const EngineStats before = o.profile ? engine.stats() : EngineStats{};
      BRAID_ASSIGN_OR_RETURN(
          LevelResult r, RunLevel(engine, o.levels[i], prefix, o.prompt_len, o.gen_len, pick, rng));
      lr.runs[i].push_back(r);
      if (o.profile) lr.stages[i].Add(before, engine.stats());
    }
    if (o.reps > 1 && threads >= 2) lr.host.push_back(MeasureCrossCoreRates(threads));
  }
  return lr;
}

// Per level the run with the median decode rate, printed as a table row.
std::vector<LevelResult> MedianLevels(const ServeBenchOptions& o, const LevelRuns& lr) {
  std::vector<LevelResult> results;
  for (const std::vector<LevelResult>& level : lr.runs) {
    std::vector<LevelResult> sorted = level;
    std::sort(sorted.begin(), sorted.end(), [](const LevelResult& a, const LevelResult& b) {
      return a.decode_tok_s < b.decode_tok_s;
    });
    const LevelResult r = sorted[sorted.size() / 2];
    results.push_back(r);
    std::printf("| %d | %d | %d | %d | %.2f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.0f%% |\n",
                r.concurrency, o.prompt_len + o.shared, o.shared, o.gen_len, r.wall_s, r.gen_tok_s,
                r.decode_tok_s, r.ttft_p50, r.ttft_p99, r.itl_p50, r.itl_p99,
                100 * r.cached_fraction);
  }
  return results;
}

// What the engine says of the whole run: speculation's guesses kept, passes
// the CPU pool ran on fewer threads.
void PrintEngineNotes(Engine& engine, const SpecOptions& spec) {
  if (spec.on()) {
    const EngineStats st = engine.stats();
    std::printf(
        "speculation (%s): %llu of %llu guesses kept, %.2f tokens per decode pass\n", spec.name(),
        static_cast<unsigned long long>(st.spec_accepted),
        static_cast<unsigned long long>(st.spec_proposed),
        st.decode_passes ? static_cast<double>(st.decode_tokens_out) / st.decode_passes : 0.0);
  }
  if (const EngineStats st = engine.stats(); st.pool_narrowed_passes > 0)
    std::printf("cpu pool: %llu of %llu passes on fewer threads (the machine was oversubscribed)\n",
                static_cast<unsigned long long>(st.pool_narrowed_passes),
                static_cast<unsigned long long>(st.pool_passes));
  std::fflush(stdout);
}

// Each level against a single request: per repetition, against the one run
// just before it (with the host's state after it), and between medians;
// then the forward stages with --profile.
void PrintRatios(const ServeBenchOptions& o, const LevelRuns& lr,
                 const std::vector<LevelResult>& results) {
  const std::vector<int>& levels = o.levels;
  if (o.reps > 1 && !levels.empty() && levels.front() == 1) {
    for (size_t i = 1; i < levels.size(); ++i) {
      std::vector<double> ratio;
      for (int rep = 0; rep < o.reps; ++rep)
        ratio.push_back(lr.runs[i][rep].decode_tok_s / lr.runs[0][rep].decode_tok_s);
      std::sort(ratio.begin(), ratio.end());
      std::printf("decode at %d concurrent / at 1, per repetition: median %.2fx (%.2f-%.2fx)\n",
                  levels[i], ratio[ratio.size() / 2], ratio.front(), ratio.back());
    }
    for (size_t k = 0; k < lr.host.size(); ++k) {
      std::printf("repetition %zu:", k + 1);
      for (size_t i = 1; i < levels.size(); ++i)
        std::printf(" %d/1 %.2fx,", levels[i],
                    lr.runs[i][k].decode_tok_s / lr.runs[0][k].decode_tok_s);
      std::printf(" then 8 MiB re-read at %.0f GB/s by the other core (%.0f by the first)%s\n",
                  lr.host[k].other / 1e9, lr.host[k].own / 1e9,
                  lr.host[k].other < 0.5 * lr.host[k].own ? ", no shared last-level cache" : "");
    }
  }
  if (!results.empty() && results.front().concurrency == 1) {
    for (const LevelResult& r : results)
      if (r.concurrency > 1)
        std::printf("decode tok/s at %d concurrent / at 1 (medians) = %.2fx\n", r.concurrency,
                    r.decode_tok_s / results.front().decode_tok_s);
  }
  if (o.profile)
    for (size_t i = 0; i < levels.size(); ++i) lr.stages[i].Print(levels[i]);
}

// The batching goal: 16 concurrent >= 6x single or >= 60% of the peak,
// whichever is lower (in tokens/s).
void PrintBatchingGoal(const std::vector<LevelResult>& results, double peak, double ops_per_token) {
  const LevelResult* one = nullptr;
  const LevelResult* sixteen = nullptr;
  for (const LevelResult& r : results) {
    if (r.concurrency == 1) one = &r;
    if (r.concurrency == 16) sixteen = &r;
  }
  if (one == nullptr || sixteen == nullptr || peak <= 0) return;
  const double by_ratio = 6.0 * one->decode_tok_s, by_peak = 0.6 * peak / ops_per_token;
  const double goal = std::min(by_ratio, by_peak);
  std::printf(
      "batching goal at 16 concurrent: %.1f tok/s (%s); reached %.1f tok/s = %.0f%% of it\n", goal,
      by_ratio <= by_peak ? "6x single" : "60% of the int8 peak", sixteen->decode_tok_s,
      100.0 * sixteen->decode_tok_s / goal);
}

// The limit in the same run: the int8 dot-product peak of all threads, and
// what fraction of it each level's decode reaches counting the useful work,
// 2 x (multiply-adds per token ~ n_params: every weight once per token, the
// tied embedding as the output head) x decode tok/s; then the batching goal.
// Returns the peak (ops/s).
double PrintPeakShare(Engine& engine, const std::vector<LevelResult>& results) {
  const int threads = engine.model()->info().threads;
  const double peak = MeasureInt8GemmPeak(threads);
  const double ops_per_token = 2.0 * static_cast<double>(engine.model()->info().n_params);
  std::printf("int8 dot peak (%d threads, vpdpbusd/maddubs loop): %.1f GOP/s\n", threads,
              peak / 1e9);
  // Whether the cores share a last-level cache: where they do not, each team
  // of a many-sequence step (one per thread) fetches the weights for itself.
  if (threads >= 2) {
    const CrossCoreRates cc = MeasureCrossCoreRates(threads);
    std::printf(
        "8 MiB just read by one core, read again: %.1f GB/s by that core, %.1f GB/s by another%s\n",
        cc.own / 1e9, cc.other / 1e9,
        cc.other < 0.5 * cc.own ? " (no shared last-level cache)" : "");
  }
  for (const LevelResult& r : results) {
    if (peak > 0)
      std::printf("decode at %d concurrent: %.1f GOP/s = %.1f%% of the int8 peak\n", r.concurrency,
                  r.decode_tok_s * ops_per_token / 1e9,
                  100.0 * r.decode_tok_s * ops_per_token / peak);
  }
  PrintBatchingGoal(results, peak, ops_per_token);
  return peak;
}

// The levels as JSON into o.json (when given). Returns the exit status.
int WriteLevelsJson(const ServeBenchOptions& o, Engine& engine, const std::string& cpu_model,
                    double peak, const std::vector<LevelResult>& results) {
  if (o.json.empty()) return 0;
  FILE* f = std::fopen(o.json.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "braid bench: cannot write '%s'\n", o.json.c_str());
    return 1;
  }
  const ModelInfo& info = engine.model()->info();
  std::fprintf(f,
               "{\"model\": \"%s\", \"cpu\": \"%s\", \"threads\": %d, \"isa\": \"%s\", "
               "\"prompt_len\": %d, \"shared_prefix\": %d, \"gen_len\": %d, "
               "\"int8_peak_gops\": %.1f, \"levels\": [",
               info.path.c_str(), JsonEscape(cpu_model).c_str(), info.threads, info.isa.c_str(),
               o.prompt_len, o.shared, o.gen_len, peak / 1e9);
  for (size_t i = 0; i < results.size(); ++i) {
    const LevelResult& r = results[i];
    std::fprintf(f,
                 "%s\n  {\"concurrency\": %d, \"wall_s\": %.3f, \"gen_tok_s\": %.2f, "
                 "\"decode_tok_s\": %.2f, \"ttft_p50_ms\": %.2f, \"ttft_p99_ms\": %.2f, "
                 "\"itl_p50_ms\": %.3f, \"itl_p99_ms\": %.3f, \"cached_fraction\": %.4f}",
                 i ? "," : "", r.concurrency, r.wall_s, r.gen_tok_s, r.decode_tok_s, r.ttft_p50,
                 r.ttft_p99, r.itl_p50, r.itl_p99, r.cached_fraction);
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
  return 0;
}

// The concurrency levels (or, with --latency-mix, the latency mix) on one
// engine, then the report.
int LevelBench(const ServeBenchOptions& o) {
  std::optional<EngineOptions> eo = LevelEngineOptions(o);
  if (!eo) return 2;
  const HostCpuSummary cpu = DescribeHostCpu();  // what every figure below was measured on
  std::printf("cpu: %s; usable: %s\n", cpu.line.c_str(), DescribeUsableCpus().c_str());
  auto opened = Engine::Open(*eo);
  if (!opened.ok()) {
    std::fprintf(stderr, "braid: %s\n", opened.status().message().c_str());
    return 1;
  }
  Engine& engine = **opened;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> pick(100, engine.model()->info().n_vocab - 1);
  std::vector<int32_t> prefix(o.shared);
  for (int32_t& t : prefix) t = pick(rng);
  if (o.latency_mix > 0)
    return LatencyMix(engine, o.latency_mix, o.prompt_len, o.gen_len, o.reps, pick, rng);
  // The shared prefix once before any measured request, so that every level
  // (and every repetition) finds it in the prefix cache alike.
  if (o.shared > 0) {
    auto h = engine.Submit(Greedy(prefix, 0, 1, pick, rng));
    if (!h.ok()) {
      std::fprintf(stderr, "braid bench: %s\n", h.status().message().c_str());
      return 1;
    }
    (*h)->Wait();
  }
  std::printf(
      "| concurrency | prompt | shared prefix | gen | wall s | gen tok/s | decode tok/s | "
      "TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | cached |\n");
  std::printf(
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  auto runs = RunLevels(engine, o, prefix, pick, rng);
  if (!runs.ok()) {
    std::fprintf(stderr, "braid bench: %s\n", runs.status().message().c_str());
    return 1;
  }
  const std::vector<LevelResult> results = MedianLevels(o, *runs);
  PrintEngineNotes(engine, o.spec);
  PrintRatios(o, *runs, results);
  const double peak = PrintPeakShare(engine, results);
  return WriteLevelsJson(o, engine, cpu.model, peak, results);
}

}  // namespace

int ServeBenchMain(Args& args) {
  ServeBenchOptions o;
  if (int rc = ReadServeBenchOptions(args, &o); rc >= 0) return rc;
  return o.rate_mode ? RateBench(o) : LevelBench(o);
}

}  // namespace braid::cli
