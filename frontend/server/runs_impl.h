// RunsService's state, shared by runs_service.cpp (the runs' lives) and
// the route modules (routes.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "http/json_body.h"
#include "lua/driver.h"
#include "lua/lua_state.h"
#include "server/memory_budget.h"
#include "server/runs_service.h"
#include "server/work_pool.h"

namespace braid::server {

// One run the server knows about (live, or finished and kept for status).
struct Entry {
  // kind: "program", "dag" or "session". client: whom the run belongs to and
  // whose work it is in the engines ("" on a server without keys, and for
  // runs of no client); fixed once registered.
  std::string id, kind, client;
  bool detached = true;
  std::shared_ptr<rt::Run> run;
  std::atomic<bool> interrupt{false};  // stops a program at its next instruction or wait
  std::atomic<bool> cancelled{false};  // CancelRun: the interrupt is a cancel, not a stop
  double created_unix = 0;
  // The run's draw on the memory budget, closed when it finishes; what it
  // held then (kept_bytes) counts against the finished runs kept.
  std::shared_ptr<RunAccount> account;
  size_t kept_bytes = 0;

  std::mutex mu;                 // guards what follows; never held while calling into `run`
  std::string state = "queued";  // queued, running, done, failed, cancelled
  nlohmann::json result;         // programs: the return value; DAGs: {ref: value}
  size_t result_bytes = 0;       // its JSON text's size
  bool result_in_store = false;  // too large to keep: `result` is null, the store has it
  std::string error;
  double finished_unix = 0;
  std::vector<std::shared_ptr<http::EventStream>> watchers;  // GET .../events
  std::shared_ptr<http::EventStream> waiter;  // the submitting connection (not detached)
  bool waiter_sse = false;                    // waiter gets events, not just the result

  // Sessions: their functions, and one builder at a time (BuildLock).
  std::timed_mutex build_mu;
  std::map<std::string, std::shared_ptr<const rt::SemanticFunction>> functions;
  int calls = 0;
  std::atomic<int64_t> last_used_ms{0};
  // Sessions driven by Lua inputs (POST .../eval): the state and driver,
  // made at the first input (the driver, declared last, goes first), one
  // input at a time, its interrupt, and the stream it answers on (guarded
  // by mu; it hears the run's events while the input runs).
  std::unique_ptr<lua::LuaState> lua;
  std::unique_ptr<lua::Driver> driver;
  std::atomic<bool> evaluating{false};
  std::atomic<bool> eval_interrupt{false};
  std::shared_ptr<http::EventStream> eval_stream;

  bool Finished() const { return state == "done" || state == "failed" || state == "cancelled"; }
};

// The run's stored value that holds its result (JSON).
inline constexpr std::string_view kResultKey = "#server:result";

struct RunsService::Impl : std::enable_shared_from_this<RunsService::Impl> {
  explicit Impl(RunsOptions o);

  RunsOptions options;
  WorkPool pool;
  mutable std::mutex mu;
  std::map<std::string, std::shared_ptr<Entry>> entries;
  std::vector<std::string> finished_order;  // oldest first, for trimming
  size_t finished_bytes = 0;                // kept_bytes of those
  std::shared_ptr<MemoryBudget> budget;
  bool has_store = false;
  std::atomic<bool> stopping{false};
  std::atomic<bool> draining{false};  // BeginDrain: no new work, no queued run starts
  std::thread reaper;
  std::mutex reaper_mu;  // guards cancel_requests
  std::condition_variable reaper_cv;
  std::vector<std::shared_ptr<Entry>> cancel_requests;

  std::shared_ptr<Entry> Find(const std::string& id) const;
  // The run `id` if it is in memory and `r` may see it (http::MaySee); null
  // otherwise, so that another client's run reads as one that does not exist.
  std::shared_ptr<Entry> FindFor(const http::Request& r, const std::string& id) const;
  bool MaySee(const http::Request& r, const std::string& owner) const {
    return http::MaySee(r, options.keyed, owner);
  }
  void Register(const std::shared_ptr<Entry>& e);
  // A new run's account on the memory budget, holding `bytes` (what its
  // submission is estimated to hold); null with *refusal set to 413 when
  // that can never fit, or 429 while the caps are full.
  std::shared_ptr<RunAccount> Admit(const std::string& client, size_t bytes,
                                    http::Response* refusal);
  // Starts a run (or resumes `resume_id`) drawing on `account` and records
  // `request` with it, so that a restarted server can resume it.
  Result<std::shared_ptr<Entry>> Start(const std::string& kind, const std::string& name,
                                       const std::string& source, std::vector<std::string> args,
                                       const std::string& client, const nlohmann::json& request,
                                       std::shared_ptr<RunAccount> account,
                                       const std::string& resume_id = "");
  // Sends an event to the run's watchers (and to its waiter when it streams).
  void Broadcast(Entry& e, const nlohmann::json& event);
  // Marks the run finished, tells everyone and closes their streams.
  void Complete(const std::shared_ptr<Entry>& e, std::string state, nlohmann::json result,
                std::string error, std::string result_text = "");
  void CancelRun(const std::shared_ptr<Entry>& e);
  // CancelRun from the service's own thread, soon: for hooks that may run
  // with locks held.
  void RequestCancel(const std::shared_ptr<Entry>& e);
  // The submission's answer: 202 with the id when detached; else a stream
  // tied to the connection (the result as JSON, or events with stream).
  http::Response Answer(const std::shared_ptr<Entry>& e, bool detached, bool sse);
  nlohmann::json StatusJson(Entry& e, bool details);

  // Records a finished program's or DAG's result (JSON text) in the store,
  // for GET /v1/runs/{id} once the run is no longer in memory.
  void RecordResult(Entry& e, const std::string& result_text);
  // The run's result as kept, or read from the store when it was too large.
  nlohmann::json ResultOf(Entry& e);
  void ExecuteProgram(const std::shared_ptr<Entry>& e, std::string source,
                      std::vector<std::string> args);
  void ExecuteDag(const std::shared_ptr<Entry>& e, DagPlan plan);
  bool Enqueue(const std::shared_ptr<Entry>& e, std::function<void()> job);

  // POST /v1/sessions/{id}/eval: one Lua input in the session
  // (session_routes.cpp).
  http::Response Evaluate(const std::shared_ptr<Entry>& e, const nlohmann::json& body);
  void ReapIdleSessions();
};

// 503 with Retry-After: the server is stopping (draining) and takes no new work.
http::Response Stopping();
// A Status as the HTTP error it means: InvalidArgument and OutOfRange 400,
// NotFound 404, TooLarge 413 (a size limit: retrying does not help),
// ResourceExhausted 429 with Retry-After (a full queue: retrying later
// may), Unsupported 501, others 500.
http::Response ErrorResponse(const Status& s);
// The body's optional "name": "" when absent or null; InvalidArgument when
// it is not a string.
Result<std::string> NameOf(const nlohmann::json& body);
int64_t SteadyMs();
// What a submission is estimated to hold once accepted, charged to the
// memory budget up front: a Lua state and the source's copies; a DAG's
// parsed body and its nodes in the runtime (measured: a 10,000-call chain
// adds 165 MB to the server).
size_t ProgramBytes(const std::string& source);
size_t DagBytes(size_t body_bytes, size_t nodes);

}  // namespace braid::server
