// The server's program surfaces (docs/http-api.md): Lua programs and whole
// DAGs submitted as runs, the incremental Parrot-style sessions that build a
// DAG call by call, and the runs themselves (list, status, cancel, the DAG
// as SVG, a stream of node changes and token deltas).
//
// Threading: routes run on the HTTP workers. A program, DAG or session input
// holds one thread of a fixed pool (RunsOptions::max_programs) while it runs
// and waits for the model; the pool is shared fairly between clients
// (work_pool.h: per-client queues, the client holding the fewest threads
// goes first, and a cap per client so that one client's stuck programs
// leave threads to the others). Submissions beyond the pool's queue are
// refused with 429. A submission that is not detached is tied to its
// connection: the client disconnecting cancels the run.
//
// Stopping (braid serve on SIGTERM): BeginDrain refuses new work and starts
// no queued run; Running says when what runs has ended; Stop interrupts the
// rest. A run the stop interrupted stays resumable in the store; one that
// ended on its own (done, failed, stopped by a limit) is finished there.
// ResumeInterrupted fails, instead of resuming, a run that was started
// RunsOptions::max_attempts times in a row without finishing a call.
//
// Ownership: every run and session belongs to the client that made it
// (RunsOptions::keyed); runs resumed after a restart keep their owner, which
// the store holds with the run. Runs of braid run in the same store have no
// owner: only admin keys see them.
#pragma once

#include <memory>
#include <string>

#include "engine/status.h"
#include "http/http_types.h"
#include "lua/lua_state.h"
#include "runtime/runtime.h"
#include "server/dag_json.h"

namespace braid::server {

struct RunsOptions {
  rt::Runtime* runtime = nullptr;  // not owned
  // How programs, DAGs and sessions run their calls: kDag (the runtime
  // sees the program), or kBaselineAsync (every call an independent
  // request: how a request-level server sees an asynchronous client).
  rt::Mode mode = rt::Mode::kDag;
  int max_programs = 16;    // programs and DAGs running at once (threads)
  size_t max_queued = 256;  // waiting for a thread, beyond which 429
  // Threads one client may hold at once (0: every thread): keep it below
  // max_programs so that another client's program always finds one.
  int max_programs_per_client = 0;
  // Times in a row a run may be started (the first run and its resumes)
  // without finishing a call: a run interrupted that often without progress
  // (it crashed the server, or the server kept stopping under it) is failed
  // instead of resumed. 0: resumed whatever happened before.
  int max_attempts = 3;
  lua::LuaLimits lua_limits;  // per program, as braid run's --lua-* options
  DagLimits dag_limits;
  size_t max_source_bytes = size_t{16} << 20;
  size_t max_finished_kept = 1000;  // finished runs whose status stays in memory
  int max_wait_ms = 60000;          // longest blocking variable read of a session
  int session_idle_ms = 600000;     // sessions unused this long are closed
  // The server has API keys: a run or session belongs to the client whose
  // key made it (http::Request::client, recorded in the store as the run's
  // owner), and only that client and admin keys see it; others get 404, as
  // for an id that does not exist. false: every request sees every run.
  bool keyed = false;
  // Memory (docs/http-api.md, "Memory"): caps on the bytes live runs hold,
  // for the server and per client (0: none). A submission is charged what
  // it is estimated to hold when accepted (413 when that can never fit,
  // 429 while the caps are full); the run's Lua heap, the values it builds
  // and its result are charged as they grow, and a run refused more fails
  // naming the cap.
  size_t memory_bytes = 0;
  size_t client_memory_bytes = 0;
  // Finished runs kept in memory for status also hold at most this much;
  // a result larger than max_result_kept_bytes is read from the store.
  size_t max_finished_bytes = size_t{64} << 20;
  size_t max_result_kept_bytes = size_t{64} << 10;
};

class RunsService {
 public:
  explicit RunsService(RunsOptions options);
  ~RunsService();

  // /v1/programs, /v1/dags, /v1/sessions/..., /v1/runs/...
  void AddRoutes(http::Router* router);
  // Resumes the programs and DAGs of this server that the store holds as
  // interrupted (the server stopped while they ran), detached; closes
  // interrupted sessions as cancelled; fails those started max_attempts
  // times without a call finished ("interrupted 3 times without progress;
  // not resumed again"). Returns how many runs were resumed.
  Result<int> ResumeInterrupted();
  // From now on new programs, DAGs, sessions and session inputs are refused
  // (503) and queued runs do not start (they stay in the store for the next
  // server); what runs goes on.
  void BeginDrain();
  // Programs, DAGs and session inputs running now.
  int Running() const;
  // Interrupts every program, DAG and input where it is (their runs stay
  // resumable in the store unless they ended on their own) and joins the
  // threads. Idempotent.
  void Stop();

  struct Counts {
    int queued = 0, running = 0, done = 0, failed = 0, cancelled = 0;
  };
  Counts counts() const;

  // The service's state (server/runs_impl.h), which its route modules
  // (server/routes.h) work on.
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace braid::server
