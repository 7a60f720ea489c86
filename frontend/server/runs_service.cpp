#include "server/runs_service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "lua/driver.h"
#include "report/run_report.h"
#include "server/routes.h"
#include "server/runs_impl.h"

namespace braid::server {

using nlohmann::json;

namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

size_t ProgramBytes(const std::string& source) { return (size_t{1} << 20) + 2 * source.size(); }

size_t DagBytes(size_t body_bytes, size_t nodes) {
  return 8 * body_bytes + nodes * (size_t{16} << 10);
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

http::Response ErrorResponse(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return http::JsonError(400, s.message());
    case StatusCode::kNotFound:
      return http::JsonError(404, s.message());
    case StatusCode::kTooLarge:  // no Retry-After: the same request fails again
      return http::JsonError(413, s.message());
    case StatusCode::kResourceExhausted: {
      http::Response r = http::JsonError(429, s.message());
      r.headers.emplace_back("Retry-After", "1");
      return r;
    }
    case StatusCode::kUnsupported:
      return http::JsonError(501, s.message());
    default:
      return http::JsonError(500, s.message());
  }
}

http::Response Stopping() {
  http::Response r = http::JsonError(503, "the server is stopping");
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

Result<std::string> NameOf(const json& body) {
  auto it = body.find("name");
  if (it == body.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Status::InvalidArgument("name: must be a string");
  return it->get<std::string>();
}

RunsService::Impl::Impl(RunsOptions o)
    : options(std::move(o)),
      pool(options.max_programs, options.max_queued, options.max_programs_per_client),
      budget(std::make_shared<MemoryBudget>(options.memory_bytes, options.client_memory_bytes)) {
  auto probe = options.runtime->StoredRuns(1);
  has_store = probe.ok() || probe.status().code() != StatusCode::kUnsupported;
}

std::shared_ptr<RunAccount> RunsService::Impl::Admit(const std::string& client, size_t bytes,
                                                     http::Response* refusal) {
  if (!budget->CouldFit(bytes)) {
    const size_t cap = budget->client_cap() ? budget->client_cap() : budget->global_cap();
    *refusal = http::JsonError(
        413, "memory budget: the submission would hold about " + Bytes(bytes) +
                 ", more than a client's cap of " + Bytes(cap) +
                 (budget->client_cap() ? " (--client-memory-mb)" : " (--memory-mb)"));
    return nullptr;
  }
  auto account = budget->Open(client);
  if (Status s = account->Take(bytes); !s.ok()) {
    *refusal = ErrorResponse(s);
    return nullptr;
  }
  return account;
}

std::shared_ptr<Entry> RunsService::Impl::Find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu);
  auto it = entries.find(id);
  return it == entries.end() ? nullptr : it->second;
}

std::shared_ptr<Entry> RunsService::Impl::FindFor(const http::Request& r,
                                                  const std::string& id) const {
  auto e = Find(id);
  return e && MaySee(r, e->client) ? e : nullptr;
}

void RunsService::Impl::Register(const std::shared_ptr<Entry>& e) {
  std::lock_guard<std::mutex> lock(mu);
  entries[e->id] = e;
}

Result<std::shared_ptr<Entry>> RunsService::Impl::Start(
    const std::string& kind, const std::string& name, const std::string& source,
    std::vector<std::string> args, const std::string& client, const json& request,
    std::shared_ptr<RunAccount> account, const std::string& resume_id) {
  rt::RunOptions ro;
  ro.program = "http:" + kind + (name.empty() ? "" : ":" + name);
  ro.program_hash = rt::ProgramHash(source);
  ro.args = std::move(args);
  ro.client = client;
  ro.resume_id = resume_id;
  ro.memory = account;
  ro.mode = options.mode;
  BRAID_ASSIGN_OR_RETURN(std::shared_ptr<rt::Run> run, options.runtime->StartRun(ro));
  // The request is recorded before the id goes back: a restarted server
  // finds what to resume in the store.
  if (resume_id.empty())
    run->Replayable("#server:request", Dump(request), rt::Run::Durability::kNow);
  auto e = std::make_shared<Entry>();
  e->id = run->id();
  e->kind = kind;
  e->client = client;
  e->run = run;
  e->account = std::move(account);
  e->created_unix = UnixNow();
  e->last_used_ms = SteadyMs();
  std::weak_ptr<Impl> self = weak_from_this();
  std::weak_ptr<Entry> weak = e;
  run->Watch([self, weak](const rt::RunEvent& ev) {
    auto impl = self.lock();
    auto entry = weak.lock();
    if (!impl || !entry) return;
    json j;
    if (ev.kind == rt::RunEvent::Kind::kTokens) {
      j = {{"type", "tokens"}, {"node", ev.node}, {"var", ev.var}, {"text", ev.text}};
    } else {
      const char* state = ev.kind == rt::RunEvent::Kind::kNodeStarted    ? "running"
                          : ev.kind == rt::RunEvent::Kind::kNodeFinished ? "done"
                                                                         : "failed";
      j = {{"type", "node"}, {"node", ev.node}, {"label", ev.label}, {"state", state}};
      if (ev.start_ms >= 0) j["start_ms"] = ev.start_ms;
      if (ev.end_ms >= 0) j["end_ms"] = ev.end_ms;
      if (!ev.text.empty()) j["error"] = ev.text;
    }
    impl->Broadcast(*entry, j);
  });
  Register(e);
  return e;
}

void RunsService::Impl::Broadcast(Entry& e, const json& event) {
  const std::string chunk = http::SseEvent(Dump(event));
  std::vector<std::shared_ptr<http::EventStream>> to;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    to = e.watchers;
    if (e.waiter && e.waiter_sse) to.push_back(e.waiter);
    if (e.eval_stream) to.push_back(e.eval_stream);
  }
  // Outside the lock: a stream that gives up on a slow client runs its
  // cancel hook from inside Send.
  for (auto& w : to) w->Send(chunk);
}

void RunsService::Impl::Complete(const std::shared_ptr<Entry>& e, std::string state, json result,
                                 std::string error, std::string result_text) {
  if (result_text.empty()) result_text = Dump(result);
  std::vector<std::shared_ptr<http::EventStream>> watchers;
  std::shared_ptr<http::EventStream> waiter;
  bool sse = false;
  std::string head;  // the final event up to its result: {"type":"run",...,"result":
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->Finished()) return;
    e->state = std::move(state);
    e->error = std::move(error);
    e->finished_unix = UnixNow();
    e->result_bytes = result_text.size();
    // A large result stays in the store only (RecordResult put it there).
    e->result_in_store =
        has_store && !result.is_null() && result_text.size() > options.max_result_kept_bytes;
    e->result = e->result_in_store ? json() : std::move(result);
    watchers.swap(e->watchers);
    waiter = std::move(e->waiter);
    sse = e->waiter_sse;
    json start = {{"id", e->id}, {"state", e->state}};
    if (!e->error.empty()) start["error"] = e->error;
    head = Dump(start);
    head.pop_back();
    head += ",\"result\":";
  }
  e->run->Watch(nullptr);
  // The result's text is spliced in rather than copied into a JSON value;
  // the last words carry it whatever its size (Finish, not Send).
  const std::string event = "{\"type\":\"run\"," + head.substr(1) + result_text + "}";
  const std::string chunk = http::SseEvent(event);
  for (auto& w : watchers) w->Finish(chunk);
  if (waiter) {
    if (sse) {
      waiter->Finish(chunk + http::SseEvent("[DONE]"));
    } else {
      waiter->Finish(head + result_text + "}\n");
    }
  }
  // Keep the newest finished runs' status in memory, within a count and a
  // byte bound (what each run held at its peak); the store keeps all.
  {
    std::lock_guard<std::mutex> lock(e->mu);
    e->kept_bytes =
        (e->account ? e->account->held() : 0) + (e->result_in_store ? 0 : e->result_bytes);
  }
  if (e->account) e->account->Close();
  std::lock_guard<std::mutex> lock(mu);
  finished_order.push_back(e->id);
  finished_bytes += e->kept_bytes;
  while (!finished_order.empty() && (finished_order.size() > options.max_finished_kept ||
                                     (finished_bytes > options.max_finished_bytes &&
                                      (has_store || finished_order.size() > 1)))) {
    auto it = entries.find(finished_order.front());
    if (it != entries.end()) {
      finished_bytes -= std::min(finished_bytes, it->second->kept_bytes);
      entries.erase(it);
    }
    finished_order.erase(finished_order.begin());
  }
}

void RunsService::Impl::RequestCancel(const std::shared_ptr<Entry>& e) {
  e->interrupt = true;  // a program stops at its next instruction or wait
  {
    std::lock_guard<std::mutex> lock(reaper_mu);
    cancel_requests.push_back(e);
  }
  reaper_cv.notify_all();
}

void RunsService::Impl::CancelRun(const std::shared_ptr<Entry>& e) {
  e->cancelled = true;
  e->interrupt = true;
  e->eval_interrupt = true;
  e->run->Cancel();
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    queued = e->state == "queued";
  }
  // A queued run has no thread to finish it; a session has none at all.
  if (queued || e->kind == "session") {
    e->run->Finish(Status::Cancelled("cancelled"));
    Complete(e, "cancelled", nullptr, "cancelled");
  }
}

http::Response RunsService::Impl::Answer(const std::shared_ptr<Entry>& e, bool detached, bool sse) {
  if (detached) {
    return http::JsonResponse(202, Dump({{"id", e->id}, {"state", "queued"}, {"kind", e->kind}}));
  }
  auto stream = std::make_shared<http::EventStream>();
  std::weak_ptr<Impl> self = weak_from_this();
  std::weak_ptr<Entry> weak = e;
  // The connection is the run's owner: when it goes, the run goes. The hook
  // may run inside a watcher (the run's lock held), so the cancellation
  // itself is left to the service's thread.
  stream->OnCancel([self, weak] {
    auto impl = self.lock();
    auto entry = weak.lock();
    if (impl && entry) impl->RequestCancel(entry);
  });
  {
    std::lock_guard<std::mutex> lock(e->mu);
    e->detached = false;
    e->waiter = stream;
    e->waiter_sse = sse;
  }
  http::Response r;
  r.status = 200;
  r.stream = stream;
  r.content_type = sse ? "text/event-stream" : "application/json";
  r.headers.emplace_back("X-Braid-Run-Id", e->id);
  if (sse)
    stream->Send(http::SseEvent(Dump({{"type", "run"}, {"id", e->id}, {"state", "queued"}})));
  return r;
}

bool RunsService::Impl::Enqueue(const std::shared_ptr<Entry>& e, std::function<void()> job) {
  std::weak_ptr<Impl> self = weak_from_this();
  return pool.TrySubmit(e->client, [self, e, job = std::move(job)] {
    auto impl = self.lock();
    // A stopping server starts nothing more: the run stays in the store for
    // the next server.
    if (!impl || impl->stopping || impl->draining) return;
    {
      std::lock_guard<std::mutex> lock(e->mu);
      if (e->Finished()) return;  // cancelled while queued
      e->state = "running";
    }
    // Counted before it runs, durably: a run that crashes the server counts
    // too (ResumeInterrupted gives up on it after max_attempts starts
    // without a call finished).
    (void)e->run->BeginAttempt();
    impl->Broadcast(*e, {{"type", "run"}, {"id", e->id}, {"state", "running"}});
    // Memory the budget did not foresee running out fails this run, not
    // the process.
    std::string failure;
    try {
      job();
    } catch (const std::bad_alloc&) {
      failure = "out of memory: the server could not allocate what the run needed";
    } catch (const std::exception& x) {
      failure = std::string("internal error: ") + x.what();
    }
    if (!failure.empty()) {
      std::fprintf(stderr, "braid serve: run %s: %s\n", e->id.c_str(), failure.c_str());
      e->run->Cancel();
      e->run->Finish(Status::Internal(failure));
      impl->Complete(e, "failed", nullptr, failure);
    }
  });
}

void RunsService::Impl::RecordResult(Entry& e, const std::string& result_text) {
  // Before the run is finished in the store: a run the store holds as done
  // has its result there, whenever the server is killed.
  (void)e.run->Replayable(std::string(kResultKey), result_text, rt::Run::Durability::kNow);
}

json RunsService::Impl::ResultOf(Entry& e) {
  {
    std::lock_guard<std::mutex> lock(e.mu);
    if (!e.result_in_store) return e.result;
  }
  auto stored = options.runtime->StoredValue(e.id, std::string(kResultKey));
  if (!stored.ok() || !*stored) return nullptr;
  json value = json::parse(**stored, nullptr, false);
  return value.is_discarded() ? json() : value;
}

void RunsService::Impl::ExecuteProgram(const std::shared_ptr<Entry>& e, std::string source,
                                       std::vector<std::string> args) {
  lua::DriverOptions d;
  d.limits = options.lua_limits;
  d.interrupt = &e->interrupt;
  d.limits.take_memory = TakeMemory(e->account);
  d.script_dir.clear();  // a submitted program reads no files
  d.read_files = false;
  Entry* raw = e.get();
  d.log = [this, raw](std::string_view line) {
    Broadcast(*raw, {{"type", "log"}, {"text", std::string(line)}});
  };
  auto result = lua::RunProgram(*e->run, "program.lua", source, args, d);
  // Interrupted by the server stopping (not cancelled): the run stays as it
  // is in the store, for a restarted server to resume. One that ended on its
  // own meanwhile (a result, an error, a limit) is finished as always.
  if (stopping && !e->cancelled && !result.ok() && result.status().code() == StatusCode::kCancelled)
    return;
  e->run->Cancel();  // what nobody waits for any more
  if (!result.ok()) {
    e->run->Finish(result.status());
    const bool cancelled = e->interrupt || result.status().code() == StatusCode::kCancelled;
    Complete(e, cancelled ? "cancelled" : "failed", nullptr, result.status().message());
    return;
  }
  // The result as a JSON value and as text: charged before they are made.
  if (Status s = e->account->Take(2 * result->text.size()); !s.ok()) {
    e->run->Finish(s);
    Complete(e, "failed", nullptr, "the program's result: " + s.message());
    return;
  }
  json value;
  if (result->kind == lua::ProgramResult::Kind::kString) {
    value = std::move(result->text);
  } else if (result->kind == lua::ProgramResult::Kind::kJson) {
    value = json::parse(result->text, nullptr, false);
  }
  result->text.clear();
  result->text.shrink_to_fit();
  std::string text = Dump(value);
  RecordResult(*e, text);
  e->run->Finish(Status::Ok());
  Complete(e, "done", std::move(value), "", std::move(text));
}

void RunsService::Impl::ExecuteDag(const std::shared_ptr<Entry>& e, DagPlan plan) {
  auto outputs = BuildDag(plan, *e->run);
  if (!outputs.ok()) {
    e->run->Cancel();
    e->run->Finish(outputs.status());
    Complete(e, "failed", nullptr, outputs.status().message());
    return;
  }
  std::vector<rt::VarId> pending;
  for (const auto& [_, v] : *outputs) pending.push_back(v);
  while (!pending.empty() && !e->interrupt) {
    e->run->WaitAny(pending, 200);
    std::erase_if(pending, [&](rt::VarId v) { return e->run->state(v) != rt::VarState::kPending; });
  }
  // Interrupted by the server stopping with outputs still pending: left for a
  // restarted server to resume.
  if (stopping && !e->cancelled && !pending.empty()) return;
  json result = json::object();
  std::string error;
  bool cancelled = e->interrupt.load();
  for (const auto& [ref, v] : *outputs) {
    const rt::VarState s = e->run->state(v);
    if (s == rt::VarState::kReady) {
      result[ref] = e->run->value(v);
    } else {
      result[ref] = nullptr;
      if (error.empty()) error = ref + ": " + e->run->error(v);
      cancelled = cancelled || s == rt::VarState::kCancelled;
    }
  }
  e->run->Cancel();
  std::string text = Dump(result);
  RecordResult(*e, text);
  const Status st = error.empty() ? Status::Ok()
                    : cancelled   ? Status::Cancelled(error)
                                  : Status::InvalidArgument(error);
  e->run->Finish(st);
  Complete(e,
           error.empty() ? "done"
           : cancelled   ? "cancelled"
                         : "failed",
           std::move(result), error, std::move(text));
}

json RunsService::Impl::StatusJson(Entry& e, bool details) {
  json j;
  bool in_store = false;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    j = {{"id", e.id},         {"kind", e.kind},         {"state", e.state},
         {"client", e.client}, {"detached", e.detached}, {"created_unix", e.created_unix}};
    if (e.finished_unix > 0) j["finished_unix"] = e.finished_unix;
    in_store = e.result_in_store;
    if (e.Finished() && !in_store) j["result"] = e.result;
    if (in_store) j["result_bytes"] = e.result_bytes;
    if (!e.error.empty()) j["error"] = e.error;
  }
  // A list leaves a large result out (result_bytes says how large); the
  // run's own status reads it from the store.
  if (!details) return j;
  if (in_store) j["result"] = ResultOf(e);
  j["nodes"] = report::NodesJson(*e.run);
  json vars = json::array();
  for (const rt::VarInfo& v : e.run->Vars()) {
    json x = {{"id", v.id},
              {"name", v.name},
              {"state", rt::VarStateName(v.state)},
              {"producer", v.producer}};
    if (v.state == rt::VarState::kReady) x["value"] = report::Truncated(v.value, 2000);
    if (!v.error.empty()) x["error"] = v.error;
    vars.push_back(std::move(x));
  }
  j["vars"] = std::move(vars);
  return j;
}

// ---- the service -------------------------------------------------------------

RunsService::RunsService(RunsOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  std::weak_ptr<Impl> weak = impl_;
  impl_->reaper = std::thread([weak] {
    while (true) {
      auto impl = weak.lock();
      if (!impl || impl->stopping) return;
      std::unique_lock<std::mutex> lock(impl->reaper_mu);
      impl->reaper_cv.wait_for(lock, std::chrono::seconds(1), [&] {
        return impl->stopping.load() || !impl->cancel_requests.empty();
      });
      if (impl->stopping) return;
      std::vector<std::shared_ptr<Entry>> cancel;
      cancel.swap(impl->cancel_requests);
      lock.unlock();
      for (auto& e : cancel) impl->CancelRun(e);
      impl->ReapIdleSessions();
    }
  });
}

RunsService::~RunsService() { Stop(); }

void RunsService::BeginDrain() { impl_->draining = true; }

int RunsService::Running() const { return impl_->pool.running(); }

void RunsService::Stop() {
  if (impl_->stopping.exchange(true)) return;
  impl_->reaper_cv.notify_all();
  if (impl_->reaper.joinable()) impl_->reaper.join();
  std::vector<std::shared_ptr<Entry>> all;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [_, e] : impl_->entries) all.push_back(e);
  }
  // Stop the programs where they are (their runs stay resumable in the
  // store), then the threads.
  for (auto& e : all) e->interrupt = e->eval_interrupt = true;
  impl_->pool.Stop();
}

void RunsService::AddRoutes(http::Router* router) {
  AddProgramRoutes(impl_, router);
  AddRunRoutes(impl_, router);
  AddSessionRoutes(impl_, router);
}

Result<int> RunsService::ResumeInterrupted() {
  auto stored = impl_->options.runtime->StoredRuns(0);
  if (!stored.ok()) {
    if (stored.status().code() == StatusCode::kUnsupported)
      return 0;  // no store: nothing to resume
    return stored.status();
  }
  int resumed = 0;
  for (const rt::RunRecord& rec : *stored) {
    if (rec.state != "interrupted" || rec.program.rfind("http:", 0) != 0) continue;
    auto value = impl_->options.runtime->StoredValue(rec.id, "#server:request");
    if (!value.ok() || !*value) continue;
    json req = json::parse(**value, nullptr, false);
    if (!req.is_object()) req = json::object();
    const std::string kind = req.value("kind", "");
    const std::string source = kind == "program" ? req.value("source", "") : req.value("dag", "");
    std::vector<std::string> args = rec.args;
    std::string name = req.value("name", "");
    if (kind == "dag" && !req.contains("name")) {
      // Recorded without its name: the DAG's body has it.
      json dag = json::parse(source, nullptr, false);
      if (dag.is_object() && dag.contains("name") && dag["name"].is_string())
        name = dag["name"].get<std::string>();
    }
    // The run goes on for the client it belongs to (the store keeps the
    // owner), in the engines' accounting and for who may see it.
    // A resumed run draws on the same budget as a new one.
    std::optional<Result<DagPlan>> plan;
    if (kind == "dag") plan = ParseDag(source, impl_->options.dag_limits);
    const size_t nodes = plan && plan->ok() ? (*plan)->nodes.size() : 0;
    const size_t bytes = kind == "program" ? ProgramBytes(source) : DagBytes(source.size(), nodes);
    http::Response refusal;
    auto account = impl_->Admit(rec.owner, bytes, &refusal);
    if (!account) {
      std::fprintf(stderr, "braid serve: not resuming run %s: %s\n", rec.id.c_str(),
                   refusal.body.c_str());
      continue;
    }
    auto e = impl_->Start(kind.empty() ? "session" : kind, name, source, args, rec.owner, req,
                          std::move(account), rec.id);
    if (!e.ok()) {
      std::fprintf(stderr, "braid serve: cannot resume run %s: %s\n", rec.id.c_str(),
                   e.status().message().c_str());
      continue;
    }
    auto entry = *e;
    // Started that many times in a row without finishing a call: it crashed
    // the server, or the server kept stopping under it. Not started again.
    const int max_attempts = impl_->options.max_attempts;
    if (max_attempts > 0 && rec.attempts >= max_attempts) {
      const std::string why = "interrupted " + std::to_string(rec.attempts) +
                              " times without progress; not resumed again";
      std::fprintf(stderr, "braid serve: run %s: %s\n", rec.id.c_str(), why.c_str());
      entry->run->Cancel();
      entry->run->Finish(Status::ResourceExhausted(why));
      impl_->Complete(entry, "failed", nullptr, why);
      continue;
    }
    std::weak_ptr<Impl> self = impl_;
    bool queued = false;
    if (kind == "program") {
      queued = impl_->Enqueue(entry, [self, entry, source, args]() mutable {
        if (auto impl = self.lock()) impl->ExecuteProgram(entry, source, args);
      });
    } else if (kind == "dag") {
      if (plan->ok())
        queued = impl_->Enqueue(entry, [self, entry, p = std::move(**plan)]() mutable {
          if (auto impl = self.lock()) impl->ExecuteDag(entry, std::move(p));
        });
    }
    if (!queued) {
      // A session (its client is gone with the old server) or no room.
      const std::string why = kind == "session" || kind.empty()
                                  ? "the server restarted; a session is not resumed"
                                  : "no room to resume it";
      entry->run->Cancel();
      entry->run->Finish(Status::Cancelled(why));
      impl_->Complete(entry, "cancelled", nullptr, why);
      continue;
    }
    ++resumed;
  }
  return resumed;
}

RunsService::Counts RunsService::counts() const {
  Counts c;
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& [_, e] : impl_->entries) {
    std::lock_guard<std::mutex> l(e->mu);
    if (e->state == "queued")
      ++c.queued;
    else if (e->state == "running")
      ++c.running;
    else if (e->state == "done")
      ++c.done;
    else if (e->state == "failed")
      ++c.failed;
    else
      ++c.cancelled;
  }
  return c;
}

}  // namespace braid::server
