#include "server/routes.h"

#include <cstdlib>
#include <string>

namespace braid::server {
namespace {

Result<rt::VarId> ParseVarId(const std::string& text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end || text[0] == '-' || v == 0)
    return Status::InvalidArgument("'" + text + "' is not a variable id");
  return static_cast<rt::VarId>(v);
}

// The session named in the path, alive, marked used and charged; or the
// error answer.
std::optional<http::Response> OpenSession(RunsService::Impl& impl, const http::Request& r,
                                          const std::string& id, std::shared_ptr<Entry>* out) {
  std::shared_ptr<Entry> e = impl.FindFor(r, id);
  if (!e || e->kind != "session") return http::JsonError(404, "no session '" + id + "'");
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->Finished()) return http::JsonError(409, "session '" + id + "' is " + e->state);
  e->last_used_ms = SteadyMs();
  if (r.method != "GET" && e->account)
    if (Status s = e->account->Take(r.body.size()); !s.ok()) return ErrorResponse(s);
  *out = std::move(e);
  return std::nullopt;
}

}  // namespace

std::optional<http::Response> OpenRoute(const std::weak_ptr<RunsService::Impl>& service,
                                        unsigned needs, const http::Request& r,
                                        const http::Params& p, RouteContext* c) {
  c->impl = service.lock();
  if (!c->impl || c->impl->stopping) return http::JsonError(503, "the server is stopping");
  if ((needs & kNewWork) && c->impl->draining) return Stopping();
  if (needs & kSession)
    if (auto err = OpenSession(*c->impl, r, p.at("id"), &c->session)) return err;
  if (needs & kVar) {
    auto v = ParseVarId(p.at("var"));
    if (!v.ok()) return ErrorResponse(v.status());
    c->var = *v;
  }
  if (needs & (kBody | kOptionalBody)) {
    auto b = http::ParseJsonObject(r.body, c->impl->options.dag_limits.max_depth,
                                   (needs & kOptionalBody) != 0);
    if (!b.ok()) return ErrorResponse(b.status());
    c->body = std::move(b).value();
  }
  return std::nullopt;
}

http::Handler Route(std::weak_ptr<RunsService::Impl> service, unsigned needs, RouteHandler fn) {
  return [service = std::move(service), needs, fn = std::move(fn)](const http::Request& r,
                                                                   const http::Params& p) {
    RouteContext c;
    if (auto err = OpenRoute(service, needs, r, p, &c)) return *err;
    return fn(c, r, p);
  };
}

}  // namespace braid::server
