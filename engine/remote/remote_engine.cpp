// RemoteEngine: each request is served by its own thread, which sends the
// completion request, turns the streamed chunks into Deltas and retries a
// request that failed before any text was delivered. A health thread probes
// the server while it is considered down.
//
// Lifetimes: the threads share the engine's State through a shared_ptr.
// Shutdown cancels every request, waits until each has delivered its final
// delta (so no callback runs after it returns) and joins the threads; it must
// not be called from a callback. Threads of finished requests are joined by
// the next Submit.
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <system_error>
#include <thread>

#include "engine/http_client.h"
#include "engine/open.h"
#include "remote/openai_stream.h"
#include "remote/prefix_memory.h"
#include "request/delta_queue.h"

namespace braid {
namespace {

using remote::HttpCall;
using remote::HttpFailure;
using remote::HttpOutcome;
using remote::HttpRequestSpec;
using remote::HttpUrl;
using SteadyClock = std::chrono::steady_clock;

double MsSince(SteadyClock::time_point a, SteadyClock::time_point b = SteadyClock::now()) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The handle; the request's thread fills its queue.
class RemoteRequest final : public RequestHandle {
 public:
  RemoteRequest(uint64_t id, DeltaCallback cb) : id_(id), deltas_(std::move(cb)) {}

  uint64_t id() const override { return id_; }
  std::optional<Delta> Next(int timeout_ms) override { return deltas_.Next(timeout_ms); }
  Completion Wait() override { return deltas_.Wait(); }
  bool finished() const override { return deltas_.finished(); }
  // Closing the connection is how the server learns to stop.
  void Cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_ = true;
    if (call_) call_->Abort();
    cv_.notify_all();
  }
  // A completions request has no goal or priority to change.
  void SetGoal(GoalClass, int, std::optional<double>) override {}

  // ---- the request's thread ----
  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancel_;
  }
  // The connection Cancel closes (null: none now).
  void SetCall(HttpCall* call) {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = call;
    if (call_ && cancel_) call_->Abort();
  }
  // Sleeps `ms` unless cancelled first; false when cancelled.
  bool Sleep(int ms) {
    std::unique_lock<std::mutex> lock(mu_);
    return !cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return cancel_; });
  }
  // Queues a delta and calls the callback (outside the lock).
  void Emit(Delta d) { deltas_.Push(std::move(d)); }
  // The final delta, publishing `result`.
  void Finish(Delta d, Completion result) { deltas_.Finish(std::move(d), std::move(result)); }

 private:
  const uint64_t id_;
  DeltaQueue deltas_;
  mutable std::mutex mu_;  // cancel_ and call_
  std::condition_variable cv_;
  bool cancel_ = false;
  HttpCall* call_ = nullptr;
};

// Everything the engine's threads share.
struct State {
  RemoteEngineOptions opt;
  HttpUrl url;
  std::string name;  // "remote engine http://host:port", for messages

  mutable std::mutex mu;
  std::condition_variable cv;  // a request ended; shutdown; the health loop's timer
  bool shutdown = false;
  uint64_t next_id = 0;
  std::map<uint64_t, std::weak_ptr<RemoteRequest>> running;  // not finished yet
  int threads = 0;  // request threads that have not delivered their final delta
  std::map<uint64_t, std::thread> workers;  // request threads not joined yet
  std::vector<uint64_t> exited;             // of those, the ones that are ending
  remote::PrefixMemory prefixes;
  EngineStats stats;
  bool alive = true;
  uint64_t downs = 0;         // times the engine was marked down
  int connect_failures = 0;   // in a row
  HttpCall* probe = nullptr;  // the health probe in progress
  std::mt19937_64 rng{std::random_device{}()};

  void ConnectFailed() {
    std::lock_guard<std::mutex> lock(mu);
    if (++connect_failures >= opt.max_connect_failures) MarkDownLocked();
  }
  void MarkDownLocked() {
    if (alive) ++downs;
    alive = false;
    cv.notify_all();
  }
  uint64_t Downs() const {
    std::lock_guard<std::mutex> lock(mu);
    return downs;
  }
  // An attempt begun when the engine had been marked down `downs_then`
  // times connected: the server answered, unless the engine was marked down
  // since (a connection made before an outage proves nothing after it).
  void Connected(uint64_t downs_then) {
    std::lock_guard<std::mutex> lock(mu);
    connect_failures = 0;
    if (downs == downs_then) alive = true;
  }
  bool IsAlive() const {
    std::lock_guard<std::mutex> lock(mu);
    return alive;
  }
  // backoff_ms * 2^attempt, scaled by a random factor in [0.5, 1).
  int BackoffMs(int attempt) {
    std::lock_guard<std::mutex> lock(mu);
    const double full = opt.backoff_ms * static_cast<double>(1u << std::min(attempt, 16));
    return static_cast<int>(full * std::uniform_real_distribution<double>(0.5, 1.0)(rng));
  }
  // Counts a finished request; rates from successful ones, as exponential
  // averages: prefill = uncached prompt tokens / time to first token,
  // decode = tokens after the first / time after the first.
  void Record(const Completion& c) {
    std::lock_guard<std::mutex> lock(mu);
    if (c.finish_reason == "cancelled")
      ++stats.requests_cancelled;
    else
      ++stats.requests_finished;
    stats.prompt_tokens += static_cast<uint64_t>(c.usage.prompt_tokens);
    stats.cached_prompt_tokens += static_cast<uint64_t>(c.usage.cached_tokens);
    stats.generated_tokens += static_cast<uint64_t>(c.usage.generated_tokens);
    if (c.finish_reason == "error" || c.finish_reason == "cancelled") return;
    auto average = [](double* avg, double sample) {
      *avg = *avg > 0 ? 0.8 * *avg + 0.2 * sample : sample;
    };
    const int uncached = c.usage.prompt_tokens - c.usage.cached_tokens;
    if (uncached > 0 && c.timings.ttft_ms > 0)
      average(&stats.prefill_tokens_per_s, uncached / (c.timings.ttft_ms / 1000.0));
    const double decode_ms = c.timings.total_ms - c.timings.ttft_ms;
    if (c.usage.generated_tokens > 1 && decode_ms > 0)
      average(&stats.decode_tokens_per_s, (c.usage.generated_tokens - 1) / (decode_ms / 1000.0));
  }
};

// GET {url}/health, each step under the connect timeout; true on a 2xx.
bool ProbeHealth(const State& st, HttpCall& call) {
  HttpRequestSpec spec;
  spec.target = st.url.base_path + "/health";
  spec.connect_timeout_ms = st.opt.connect_timeout_ms;
  spec.first_timeout_ms = st.opt.connect_timeout_ms;
  const HttpOutcome out =
      call.Run(st.url, spec, [&](std::string_view) { return st.opt.connect_timeout_ms; });
  return out.failure == HttpFailure::kNone && out.status / 100 == 2;
}

// One attempt's view of the stream.
struct StreamState {
  std::string finish_reason;
  std::string error;  // an error chunk or a malformed one
  bool done = false;  // [DONE] seen
  bool has_usage = false;
  Usage usage;
  int text_chunks = 0;
};

class RequestRunner {
 public:
  RequestRunner(std::shared_ptr<State> st, std::shared_ptr<RemoteRequest> r, std::string body,
                int prompt_tokens, SteadyClock::time_point submitted)
      : st_(std::move(st)),
        r_(std::move(r)),
        body_(std::move(body)),
        prompt_tokens_(prompt_tokens),
        submitted_(submitted) {}

  void Run() {
    for (int attempt = 0;; ++attempt) {
      if (r_->cancelled()) return Finish("cancelled", "");
      std::string why;
      const bool retryable = Attempt(&why);
      if (why.empty()) return Finish(ss_.finish_reason, "");
      if (r_->cancelled()) return Finish("cancelled", "");
      const bool again =
          retryable && !delivered_ && attempt < st_->opt.max_retries && st_->IsAlive();
      if (!again) {
        if (attempt > 0) why += " (after " + std::to_string(attempt + 1) + " attempts)";
        if (broken_) CheckHealth();
        return Finish("error", st_->name + ": " + why);
      }
      if (!r_->Sleep(st_->BackoffMs(attempt))) return Finish("cancelled", "");
    }
  }

 private:
  // One request to the server. Returns whether a failure may be retried;
  // *why is empty when the stream ended properly.
  bool Attempt(std::string* why) {
    ss_ = StreamState{};
    broken_ = false;
    const uint64_t downs = st_->Downs();
    remote::SseReader sse;
    const SteadyClock::time_point first_deadline =
        SteadyClock::now() + std::chrono::milliseconds(st_->opt.first_token_timeout_ms);
    auto on_body = [&](std::string_view bytes) -> int {
      std::vector<std::string> events;
      sse.Feed(bytes, &events);
      for (const std::string& e : events)
        if (!OnEvent(e)) return 0;
      if (delivered_) return st_->opt.idle_timeout_ms;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(first_deadline -
                                                                              SteadyClock::now());
      return std::max<int>(1, static_cast<int>(left.count()));
    };
    HttpRequestSpec spec;
    spec.method = "POST";
    spec.target = st_->url.base_path + "/v1/completions";
    spec.body = body_;
    spec.headers.emplace_back("Accept", "text/event-stream");
    if (!st_->opt.api_key.empty())
      spec.headers.emplace_back("Authorization", "Bearer " + st_->opt.api_key);
    spec.connect_timeout_ms = st_->opt.connect_timeout_ms;
    spec.first_timeout_ms = st_->opt.first_token_timeout_ms;

    HttpCall call;
    r_->SetCall(&call);
    const HttpOutcome out = call.Run(st_->url, spec, on_body);
    r_->SetCall(nullptr);
    if (out.failure == HttpFailure::kConnect) {
      st_->ConnectFailed();
      *why = "cannot connect: " + out.error;
      return true;
    }
    if (out.connected) st_->Connected(downs);
    if (ss_.error.empty() && !ss_.done && out.failure != HttpFailure::kTimeout)
      if (auto last = sse.Finish()) OnEvent(*last);
    if (!ss_.error.empty()) {
      *why = ss_.error;
      return false;
    }
    if (ss_.done || !ss_.finish_reason.empty()) return false;  // complete
    broken_ = out.failure == HttpFailure::kClosed || out.failure == HttpFailure::kTimeout;
    switch (out.failure) {
      case HttpFailure::kTimeout:
        *why = delivered_ ? "no data for " + std::to_string(st_->opt.idle_timeout_ms) +
                                " ms (idle_timeout_ms) while streaming"
                          : "no text within " + std::to_string(st_->opt.first_token_timeout_ms) +
                                " ms (first_token_timeout_ms)";
        return false;
      case HttpFailure::kClosed:
        *why = "the connection closed: " + out.error;
        return true;
      case HttpFailure::kProtocol:
        *why = "not a valid HTTP response: " + out.error;
        return false;
      case HttpFailure::kCancelled:
        *why = "cancelled";
        return false;
      case HttpFailure::kConnect:
      case HttpFailure::kNone:
        break;
    }
    if (out.status / 100 != 2) {
      *why = "HTTP " + std::to_string(out.status) + ": " + remote::ErrorBodyMessage(out.error_body);
      return out.status >= 500 || out.status == 429;
    }
    *why = "the stream ended without a finish reason or [DONE]";
    return true;
  }

  // Handles one event; false stops reading.
  bool OnEvent(const std::string& data) {
    auto chunk = remote::ParseCompletionChunk(data);
    if (!chunk.ok()) {
      ss_.error = chunk.status().message();
      return false;
    }
    if (!chunk->error.empty()) {
      ss_.error = "the server reported: " + chunk->error;
      return false;
    }
    if (chunk->done) {
      ss_.done = true;
      return false;
    }
    if (chunk->has_usage) {
      ss_.has_usage = true;
      ss_.usage = chunk->usage;
    }
    if (!chunk->finish_reason.empty()) ss_.finish_reason = chunk->finish_reason;
    if (chunk->text.empty() && chunk->logprobs.empty()) return true;
    const auto now = SteadyClock::now();
    if (!delivered_)
      result_.timings.ttft_ms = MsSince(submitted_, now);
    else
      result_.timings.inter_token_ms.push_back(MsSince(last_text_, now));
    delivered_ = true;
    last_text_ = now;
    ++ss_.text_chunks;
    Delta d;
    d.text = std::move(chunk->text);
    for (float lp : chunk->logprobs) d.logprobs.push_back({-1, lp, {}});
    result_.text += d.text;
    result_.logprobs.insert(result_.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    r_->Emit(std::move(d));
    return true;
  }

  // A stream that broke may mean the server went away, which connection
  // failures would only reveal to later requests: when its /health does not
  // answer either, the engine is down now (callers then move this request
  // elsewhere), until the health thread sees it answer.
  void CheckHealth() {
    HttpCall call;
    r_->SetCall(&call);
    const bool healthy = ProbeHealth(*st_, call);
    r_->SetCall(nullptr);
    if (healthy || r_->cancelled()) return;
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->MarkDownLocked();
  }

  void Finish(std::string reason, std::string error) {
    if (reason == "abort") {  // the server gave up on it (it was not cancelled here)
      reason = "error";
      error = st_->name + ": the server aborted the request";
    }
    if (reason.empty()) reason = "stop";
    result_.finish_reason = reason;
    result_.error = error;
    if (ss_.has_usage) {
      result_.usage = ss_.usage;
    } else {
      result_.usage.prompt_tokens = prompt_tokens_;
      result_.usage.generated_tokens = ss_.text_chunks;
    }
    result_.timings.total_ms = MsSince(submitted_);
    st_->Record(result_);
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->running.erase(r_->id());
    }
    Delta d;
    d.finished = true;
    d.finish_reason = reason;
    d.error = error;
    r_->Finish(std::move(d), result_);
    std::lock_guard<std::mutex> lock(st_->mu);
    --st_->threads;
    st_->exited.push_back(r_->id());
    st_->cv.notify_all();
  }

  std::shared_ptr<State> st_;
  std::shared_ptr<RemoteRequest> r_;
  const std::string body_;
  const int prompt_tokens_;
  const SteadyClock::time_point submitted_;
  StreamState ss_;
  Completion result_;
  bool delivered_ = false;  // text reached the caller: no more retries
  bool broken_ = false;     // the last attempt's connection closed or stalled
  SteadyClock::time_point last_text_;
};

void HealthLoop(const std::shared_ptr<State>& st) {
  std::unique_lock<std::mutex> lock(st->mu);
  while (true) {
    st->cv.wait_for(lock, std::chrono::milliseconds(st->opt.health_interval_ms),
                    [&] { return st->shutdown; });
    if (st->shutdown) return;
    if (st->alive) continue;
    HttpCall call;
    st->probe = &call;
    lock.unlock();
    const bool healthy = ProbeHealth(*st, call);
    lock.lock();
    st->probe = nullptr;
    if (healthy) {
      st->alive = true;
      st->connect_failures = 0;
    }
  }
}

class RemoteEngine final : public Engine {
 public:
  explicit RemoteEngine(std::shared_ptr<State> st) : st_(std::move(st)) {
    health_ = std::thread([st = st_] { HealthLoop(st); });
  }
  ~RemoteEngine() override { Shutdown(); }

  Result<std::shared_ptr<RequestHandle>> Submit(GenerationRequest request,
                                                DeltaCallback on_delta) override {
    auto refuse = [&](const std::string& feature) {
      return Status::Unsupported(st_->name + ": " + feature +
                                 " cannot be done by an OpenAI-compatible server; run it on an "
                                 "embedded engine");
    };
    if (!request.score_choices.empty()) return refuse("choice scoring (score_choices)");
    if (request.prompt_logprobs_from >= 0) return refuse("prompt scoring (prompt_logprobs_from)");
    if (request.logits_processor) return refuse("constrained decoding (logits_processor)");
    if (request.prompt.empty() && request.prompt_text.empty())
      return Status::InvalidArgument(st_->name + ": the prompt is empty");
    if (st_->opt.detokenize && !request.prompt.empty()) {
      request.prompt_text = st_->opt.detokenize(request.prompt);
      request.prompt.clear();
    }
    std::string body = remote::CompletionRequestBody(request, st_->opt.model);
    std::shared_ptr<RemoteRequest> r;
    std::vector<std::thread> ended;
    Status refused;
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      if (st_->shutdown) return Status::Cancelled(st_->name + " is shut down");
      if (static_cast<int>(st_->running.size()) >= st_->opt.max_in_flight)
        return Status::ResourceExhausted(st_->name + ": " + std::to_string(st_->opt.max_in_flight) +
                                         " requests in flight already (max_in_flight)");
      for (uint64_t id : st_->exited) {  // no return from here on: `ended` must be joined
        auto it = st_->workers.find(id);
        ended.push_back(std::move(it->second));
        st_->workers.erase(it);
      }
      st_->exited.clear();
      r = std::make_shared<RemoteRequest>(++st_->next_id, std::move(on_delta));
      st_->running[r->id()] = r;
      ++st_->threads;
      st_->prefixes.Remember(request.prompt, request.cache_salt);
      auto runner = std::make_shared<RequestRunner>(
          st_, r, std::move(body), static_cast<int>(request.prompt.size()), SteadyClock::now());
      try {
        // Under the lock: the thread's own end (Finish) waits for it, so
        // the thread is in `workers` before it can be reaped.
        st_->workers.emplace(r->id(), std::thread([runner] { runner->Run(); }));
      } catch (const std::system_error& e) {
        st_->running.erase(r->id());
        --st_->threads;
        r.reset();
        refused = Status::ResourceExhausted(st_->name + ": cannot start a thread: " + e.what());
      }
    }
    for (std::thread& t : ended) t.join();  // each is past its final delta
    if (!refused.ok()) return refused;
    return std::shared_ptr<RequestHandle>(std::move(r));
  }

  int ProbePrefix(const std::vector<int32_t>& tokens, uint64_t salt) override {
    std::lock_guard<std::mutex> lock(st_->mu);
    return st_->prefixes.LongestPrefix(tokens, salt);
  }
  uint64_t Pin(const std::vector<int32_t>&, uint64_t) override { return 0; }
  void Unpin(uint64_t) override {}

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(st_->mu);
    EngineStats s = st_->stats;
    s.running = static_cast<int>(st_->running.size());
    return s;
  }
  Model* model() override { return nullptr; }
  bool alive() const override { return st_->IsAlive(); }

  void Shutdown() override {
    std::vector<std::shared_ptr<RemoteRequest>> live;
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      st_->shutdown = true;
      if (st_->probe) st_->probe->Abort();
      for (auto& [id, w] : st_->running)
        if (auto r = w.lock()) live.push_back(std::move(r));
      st_->cv.notify_all();
    }
    for (auto& r : live) r->Cancel();
    std::map<uint64_t, std::thread> workers;
    {
      std::unique_lock<std::mutex> lock(st_->mu);
      st_->cv.wait(lock, [&] { return st_->threads == 0; });
      workers.swap(st_->workers);
      st_->exited.clear();
    }
    for (auto& [id, t] : workers) t.join();
    if (health_.joinable()) health_.join();
  }

 private:
  std::shared_ptr<State> st_;
  std::thread health_;
};

}  // namespace

Result<std::unique_ptr<Engine>> OpenRemoteEngine(const RemoteEngineOptions& options) {
  BRAID_ASSIGN_OR_RETURN(HttpUrl url, remote::ParseHttpUrl(options.url));
  const std::pair<const char*, int> limits[] = {
      {"connect_timeout_ms", options.connect_timeout_ms},
      {"first_token_timeout_ms", options.first_token_timeout_ms},
      {"idle_timeout_ms", options.idle_timeout_ms},
      {"max_in_flight", options.max_in_flight},
      {"max_connect_failures", options.max_connect_failures},
      {"health_interval_ms", options.health_interval_ms}};
  for (const auto& [name, value] : limits)
    if (value <= 0)
      return Status::InvalidArgument("remote engine " + options.url + ": " + name +
                                     " must be positive, got " + std::to_string(value));
  if (options.max_retries < 0 || options.backoff_ms < 0)
    return Status::InvalidArgument("remote engine " + options.url +
                                   ": max_retries and backoff_ms must not be negative");
  auto st = std::make_shared<State>();
  st->opt = options;
  st->url = std::move(url);
  st->name = "remote engine " + options.url;
  return std::unique_ptr<Engine>(std::make_unique<RemoteEngine>(std::move(st)));
}

}  // namespace braid
