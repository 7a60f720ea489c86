// The stored run's JSON: the exact key set, created_unix from the record's
// start, durations without the paused time, nulls for a run that never
// finished, the owner as client.
#include "report/run_record.h"

#include <doctest/doctest.h>

#include <set>
#include <string>

namespace braid::report {
namespace {

rt::RunRecord Finished() {
  rt::RunRecord r;
  r.id = "run-20261201-205916-281666";
  r.program = "/apps/map_reduce/app.lua";
  r.state = "done";
  r.owner = "alice";
  r.args = {"in.txt", "3"};
  r.started_unix = 1700000000.25;
  r.finished_unix = 1700000012.75;
  r.paused_seconds = 2.5;
  r.nodes_done = 4;
  r.nodes_failed = 1;
  r.prompt_tokens = 600;
  r.cached_tokens = 120;
  r.generated_tokens = 21;
  return r;
}

std::set<std::string> Keys(const nlohmann::json& j) {
  std::set<std::string> keys;
  for (const auto& [k, _] : j.items()) keys.insert(k);
  return keys;
}

TEST_CASE("a stored run's JSON has one key set, created_unix among it") {
  const nlohmann::json j = RunRecordJson(Finished());
  const std::set<std::string> want = {
      "id",         "program",      "args",          "client",        "state",
      "error",      "created_unix", "finished_unix", "duration_s",    "paused_s",
      "nodes_done", "nodes_failed", "prompt_tokens", "cached_tokens", "generated_tokens"};
  CHECK(Keys(j) == want);
  CHECK_FALSE(j.contains("started_unix"));
  // A run that never finished has the same keys.
  rt::RunRecord open = Finished();
  open.finished_unix = 0;
  CHECK(Keys(RunRecordJson(open)) == want);
}

TEST_CASE("a finished run's times, owner and totals") {
  const nlohmann::json j = RunRecordJson(Finished());
  CHECK(j["id"] == "run-20261201-205916-281666");
  CHECK(j["program"] == "/apps/map_reduce/app.lua");
  CHECK(j["args"] == nlohmann::json::array({"in.txt", "3"}));
  CHECK(j["client"] == "alice");
  CHECK(j["state"] == "done");
  CHECK(j["error"] == "");
  CHECK(j["created_unix"].get<double>() == doctest::Approx(1700000000.25));
  CHECK(j["finished_unix"].get<double>() == doctest::Approx(1700000012.75));
  // 12.5 s between start and finish, 2.5 of them between a stop and a resume.
  CHECK(j["duration_s"].get<double>() == doctest::Approx(10.0));
  CHECK(j["paused_s"].get<double>() == doctest::Approx(2.5));
  CHECK(j["nodes_done"] == 4);
  CHECK(j["nodes_failed"] == 1);
  CHECK(j["prompt_tokens"] == 600);
  CHECK(j["cached_tokens"] == 120);
  CHECK(j["generated_tokens"] == 21);
}

TEST_CASE("an unfinished run has null times and keeps its error") {
  rt::RunRecord r = Finished();
  r.state = "interrupted";
  r.finished_unix = 0;
  r.error = "killed";
  r.owner.clear();
  const nlohmann::json j = RunRecordJson(r);
  CHECK(j["finished_unix"].is_null());
  CHECK(j["duration_s"].is_null());
  CHECK(j["created_unix"].get<double>() == doctest::Approx(1700000000.25));
  CHECK(j["error"] == "killed");
  CHECK(j["client"] == "");
  CHECK(j["state"] == "interrupted");
  CHECK(RunSeconds(r) < 0);
  CHECK(RunSeconds(Finished()) == doctest::Approx(10.0));
}

}  // namespace
}  // namespace braid::report
