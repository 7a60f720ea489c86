// A run as the run store recorded it (rt::RunRecord), as JSON: the one
// rendering shared by `braid runs --json` and the server's run routes
// (GET /v1/runs, GET /v1/runs/{id} for runs no longer in memory), so that a
// stored run reads the same wherever it is read (docs/http-api.md, "Run
// records").
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/runtime.h"

namespace braid::report {

// Every key is always present:
//   id, program, args, client (the owner; "" for runs of no client), state,
//   error ("" when none), created_unix, finished_unix and duration_s (null
//   until the run finished; the duration leaves out paused_s, the time
//   between a stop and its resume), paused_s, nodes_done, nodes_failed,
//   prompt_tokens, cached_tokens, generated_tokens.
nlohmann::json RunRecordJson(const rt::RunRecord& r);

// The run's duration in seconds (finished - created - paused); -1 when it
// never finished.
double RunSeconds(const rt::RunRecord& r);

}  // namespace braid::report
