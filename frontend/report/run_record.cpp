#include "report/run_record.h"

namespace braid::report {

double RunSeconds(const rt::RunRecord& r) {
  if (r.finished_unix <= 0) return -1;  // never finished
  return r.finished_unix - r.started_unix - r.paused_seconds;
}

nlohmann::json RunRecordJson(const rt::RunRecord& r) {
  using nlohmann::json;
  const bool finished = r.finished_unix > 0;
  return {{"id", r.id},
          {"program", r.program},
          {"args", r.args},
          {"client", r.owner},
          {"state", r.state},
          {"error", r.error},
          {"created_unix", r.started_unix},
          {"finished_unix", finished ? json(r.finished_unix) : json()},
          {"duration_s", finished ? json(RunSeconds(r)) : json()},
          {"paused_s", r.paused_seconds},
          {"nodes_done", r.nodes_done},
          {"nodes_failed", r.nodes_failed},
          {"prompt_tokens", r.prompt_tokens},
          {"cached_tokens", r.cached_tokens},
          {"generated_tokens", r.generated_tokens}};
}

}  // namespace braid::report
