// The route modules of RunsService, one per resource (docs/http-api.md):
// program_routes.cpp (POST /v1/programs, POST /v1/dags: submissions),
// run_routes.cpp (/v1/runs/...), session_routes.cpp (/v1/sessions/...).
// Each registers handlers made by Route, which runs the preamble they share
// (the service alive, the session named in the path, the body as a JSON
// object) before the handler's own work.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "http/http_types.h"
#include "server/runs_impl.h"

namespace braid::server {

// What a handler needs before its own work; Route checks them in this order,
// after the service (503 "the server is stopping" once it stops).
enum RouteNeed : unsigned {
  kNoNeed = 0,
  // New work: refused with 503 and Retry-After while the server drains.
  kNewWork = 1u << 0,
  // The session named by the path's {id}: one the caller may see (another
  // client's is 404, as one that does not exist), not finished (409), marked
  // used; a request other than GET is charged its body's size on the
  // session's memory account (what it adds is held until the session ends).
  kSession = 1u << 1,
  // The path's {var} is a variable id (a positive integer; 400 otherwise).
  kVar = 1u << 2,
  // The body is one JSON object (400 otherwise), nested at most
  // DagLimits::max_depth deep.
  kBody = 1u << 3,
  // As kBody, an empty body reading as {}.
  kOptionalBody = 1u << 4,
};

// What the preamble found, for the handler.
struct RouteContext {
  std::shared_ptr<RunsService::Impl> impl;  // alive and not stopping
  std::shared_ptr<Entry> session;           // kSession
  rt::VarId var = 0;                        // kVar
  nlohmann::json body;                      // kBody, kOptionalBody: an object
};

using RouteHandler =
    std::function<http::Response(RouteContext&, const http::Request&, const http::Params&)>;

// The preamble `needs` asks for, as a call: its error answer, or nothing
// with *c filled in. Any worker thread.
std::optional<http::Response> OpenRoute(const std::weak_ptr<RunsService::Impl>& service,
                                        unsigned needs, const http::Request& r,
                                        const http::Params& p, RouteContext* c);
// A router handler: OpenRoute, then `fn` with what it found. The handler
// holds the service weakly: routes outliving it answer 503.
http::Handler Route(std::weak_ptr<RunsService::Impl> service, unsigned needs, RouteHandler fn);

// The route modules.
void AddProgramRoutes(const std::weak_ptr<RunsService::Impl>& service, http::Router* router);
void AddRunRoutes(const std::weak_ptr<RunsService::Impl>& service, http::Router* router);
void AddSessionRoutes(const std::weak_ptr<RunsService::Impl>& service, http::Router* router);

}  // namespace braid::server
