// The submission routes: POST /v1/programs (a Lua program) and POST /v1/dags
// (a whole DAG as JSON, dag_json.h) become runs on the program pool,
// detached (202 with the id) or tied to the connection (the result, or its
// events with "stream").
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/routes.h"
#include "server/runs_impl.h"

namespace braid::server {

using nlohmann::json;

namespace {

// Reads an optional boolean field; InvalidArgument naming it otherwise.
Result<bool> Bool(const json& body, const char* key, bool def) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return def;
  if (!it->is_boolean())
    return Status::InvalidArgument(std::string(key) + ": must be true or false");
  return it->get<bool>();
}

// The program's "source" (present, within max_source_bytes) and "args" (a
// list of strings); or the error answer.
std::optional<http::Response> ReadProgram(const json& body, size_t max_source_bytes,
                                          std::string* source, std::vector<std::string>* args) {
  auto src = body.find("source");
  if (src == body.end() || !src->is_string() || src->get<std::string>().empty())
    return http::JsonError(400, "source: the program's Lua text is missing", "", "source");
  *source = src->get<std::string>();
  if (source->size() > max_source_bytes)
    return http::JsonError(413, "source: " + std::to_string(source->size()) +
                                    " bytes, over the limit of " +
                                    std::to_string(max_source_bytes));
  if (auto a = body.find("args"); a != body.end() && !a->is_null()) {
    if (!a->is_array())
      return http::JsonError(400, "args: must be an array of strings", "", "args");
    for (const json& x : *a) {
      if (!x.is_string())
        return http::JsonError(400, "args: must be an array of strings", "", "args");
      args->push_back(x.get<std::string>());
    }
  }
  return std::nullopt;
}

// POST /v1/programs.
http::Response PostProgram(RouteContext& c, const http::Request& r, const http::Params&) {
  RunsService::Impl& impl = *c.impl;
  std::string source;
  std::vector<std::string> args;
  if (auto err = ReadProgram(c.body, impl.options.max_source_bytes, &source, &args)) return *err;
  auto detached = Bool(c.body, "detached", false);
  auto sse = Bool(c.body, "stream", false);
  if (!detached.ok()) return ErrorResponse(detached.status());
  if (!sse.ok()) return ErrorResponse(sse.status());
  auto name = NameOf(c.body);
  if (!name.ok()) return ErrorResponse(name.status());
  if (impl.draining) return Stopping();
  if (!impl.pool.HasRoom())
    return ErrorResponse(Status::ResourceExhausted("the program queue is full"));
  http::Response refusal;
  auto account = impl.Admit(r.client, ProgramBytes(source), &refusal);
  if (!account) return refusal;
  json record = {{"kind", "program"}, {"source", source}, {"args", args}, {"name", *name}};
  auto e = impl.Start("program", *name, source, args, r.client, record, std::move(account));
  if (!e.ok()) return ErrorResponse(e.status());
  http::Response answer = impl.Answer(*e, *detached, *sse);
  std::weak_ptr<RunsService::Impl> self = c.impl;
  auto entry = *e;
  if (!impl.Enqueue(entry,
                    [self, entry, source = std::move(source), args = std::move(args)]() mutable {
                      if (auto i = self.lock())
                        i->ExecuteProgram(entry, std::move(source), std::move(args));
                    })) {
    impl.CancelRun(entry);
    return ErrorResponse(Status::ResourceExhausted("the program queue is full"));
  }
  return answer;
}

// POST /v1/dags.
http::Response PostDag(RouteContext& c, const http::Request& r, const http::Params&) {
  RunsService::Impl& impl = *c.impl;
  auto plan = ParseDag(r.body, impl.options.dag_limits);
  if (!plan.ok()) return ErrorResponse(plan.status());
  json body = json::parse(r.body, nullptr, false);  // parsed once already: valid
  auto detached = Bool(body, "detached", false);
  auto sse = Bool(body, "stream", false);
  if (!detached.ok()) return ErrorResponse(detached.status());
  if (!sse.ok()) return ErrorResponse(sse.status());
  if (impl.draining) return Stopping();
  if (!impl.pool.HasRoom())
    return ErrorResponse(Status::ResourceExhausted("the DAG queue is full"));
  // The name is part of the run's program ("http:dag:NAME"): a restarted
  // server resumes the run under the same one.
  auto name = NameOf(body);
  if (!name.ok()) return ErrorResponse(name.status());
  http::Response refusal;
  auto account = impl.Admit(r.client, DagBytes(r.body.size(), plan->nodes.size()), &refusal);
  if (!account) return refusal;
  json record = {{"kind", "dag"}, {"dag", r.body}, {"name", *name}};
  auto e = impl.Start("dag", *name, r.body, {}, r.client, record, std::move(account));
  if (!e.ok()) return ErrorResponse(e.status());
  http::Response answer = impl.Answer(*e, *detached, *sse);
  std::weak_ptr<RunsService::Impl> self = c.impl;
  auto entry = *e;
  if (!impl.Enqueue(entry, [self, entry, p = std::move(*plan)]() mutable {
        if (auto i = self.lock()) i->ExecuteDag(entry, std::move(p));
      })) {
    impl.CancelRun(entry);
    return ErrorResponse(Status::ResourceExhausted("the DAG queue is full"));
  }
  return answer;
}

}  // namespace

void AddProgramRoutes(const std::weak_ptr<RunsService::Impl>& service, http::Router* router) {
  router->Add("POST", "/v1/programs", Route(service, kBody, PostProgram));
  // The DAG parser reads the body itself (dag_json.h), with its own errors.
  router->Add("POST", "/v1/dags", Route(service, kNoNeed, PostDag));
}

}  // namespace braid::server
