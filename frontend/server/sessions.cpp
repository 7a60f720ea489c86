// The incremental API, after Parrot's: a session is a run that a client
// builds call by call over HTTP. It registers templates, adds calls whose
// inputs are literal text or variables it holds, creates variables it sets
// itself, and reads variables with a goal, blocking up to a timeout.
#include <nlohmann/json.hpp>

#include "server/runs_impl.h"

namespace braid::server {

using nlohmann::json;

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Result<rt::VarId> ParseVarId(const std::string& text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end || text[0] == '-' || v == 0)
    return Status::InvalidArgument("'" + text + "' is not a variable id");
  return static_cast<rt::VarId>(v);
}

bool KnownVar(rt::Run& run, rt::VarId v) {
  const auto vars = run.Vars();
  return v >= 1 && v <= vars.size();
}

// A function spec from {template, system?, messages?, lazy?}.
Result<rt::FunctionSpec> SpecOf(const json& b, const std::string& name) {
  rt::FunctionSpec spec;
  spec.name = name;
  auto t = b.find("template");
  if (t == b.end() || !t->is_string())
    return Status::InvalidArgument("template: the function's template text is missing");
  spec.prompt = t->get<std::string>();
  if (auto s = b.find("system"); s != b.end() && s->is_string())
    spec.system = s->get<std::string>();
  if (auto l = b.find("lazy"); l != b.end() && l->is_boolean()) spec.lazy = l->get<bool>();
  if (auto m = b.find("messages"); m != b.end() && m->is_array())
    for (const json& x : *m) {
      if (!x.is_object() || !x.contains("role") || !x.contains("content") ||
          !x["role"].is_string() || !x["content"].is_string())
        return Status::InvalidArgument("messages: each must be {role, content} strings");
      spec.messages.push_back({x["role"].get<std::string>(), x["content"].get<std::string>()});
    }
  return spec;
}

// The session's builder lock, waited for at most 2 s: a Lua input holds it
// while it runs, and a route then answers 409 instead of holding a worker.
std::unique_lock<std::timed_mutex> BuildLock(Entry& e) {
  return std::unique_lock<std::timed_mutex>(e.build_mu, std::chrono::seconds(2));
}

http::Response Busy() {
  return http::JsonError(409, "the session is busy: an input is being evaluated in it");
}

}  // namespace

void RunsService::Impl::ReapIdleSessions() {
  std::vector<std::shared_ptr<Entry>> idle;
  const int64_t now = SteadyMs();
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [_, e] : entries)
      if (e->kind == "session" && now - e->last_used_ms > options.session_idle_ms)
        idle.push_back(e);
  }
  for (auto& e : idle) {
    bool live = false;
    {
      std::lock_guard<std::mutex> lock(e->mu);
      live = !e->Finished();
    }
    if (!live) continue;
    e->run->Cancel();
    e->run->Finish(Status::Cancelled("the session was idle too long"));
    Complete(e, "cancelled", nullptr,
             "the session was idle for " + std::to_string(options.session_idle_ms) + " ms");
  }
}

void RunsService::Impl::AddSessionRoutes(http::Router* router) {
  std::weak_ptr<Impl> weak = weak_from_this();
  // The session named in the path, alive, marked used; or the error answer.
  // Another client's session is 404, as one that does not exist.
  auto session = [weak](const http::Request& r, const http::Params& p, std::shared_ptr<Impl>* impl,
                        std::shared_ptr<Entry>* e) -> std::optional<http::Response> {
    *impl = weak.lock();
    if (!*impl || (*impl)->stopping) return http::JsonError(503, "the server is stopping");
    *e = (*impl)->FindFor(r, p.at("id"));
    if (!*e || (*e)->kind != "session")
      return http::JsonError(404, "no session '" + p.at("id") + "'");
    std::lock_guard<std::mutex> lock((*e)->mu);
    if ((*e)->Finished())
      return http::JsonError(409, "session '" + p.at("id") + "' is " + (*e)->state);
    (*e)->last_used_ms = SteadyMs();
    // What a request adds to the session (functions, values, calls) is
    // held until it ends: charged at about its body's size.
    if (r.method != "GET" && (*e)->account)
      if (Status s = (*e)->account->Take(r.body.size()); !s.ok()) return ErrorResponse(s);
    return std::nullopt;
  };
  auto body_of = [weak](const http::Request& r) -> Result<json> {
    auto impl = weak.lock();
    const int depth = impl ? impl->options.dag_limits.max_depth : 32;
    BRAID_ASSIGN_OR_RETURN(json b, http::ParseJsonBody(r.body.empty() ? "{}" : r.body, depth));
    if (!b.is_object()) return Status::InvalidArgument("the body must be a JSON object");
    return b;
  };

  router->Add("POST", "/v1/sessions", [weak, body_of](const http::Request& r, const http::Params&) {
    auto impl = weak.lock();
    if (!impl || impl->stopping) return http::JsonError(503, "the server is stopping");
    if (impl->draining) return Stopping();
    auto b = body_of(r);
    if (!b.ok()) return ErrorResponse(b.status());
    auto name = NameOf(*b);
    if (!name.ok()) return ErrorResponse(name.status());
    http::Response refusal;
    auto account = impl->Admit(r.client, size_t{1} << 20, &refusal);
    if (!account) return refusal;
    auto e = impl->Start("session", *name, "", {}, r.client, {{"kind", "session"}, {"name", *name}},
                         std::move(account));
    if (!e.ok()) return ErrorResponse(e.status());
    {
      std::lock_guard<std::mutex> lock((*e)->mu);
      (*e)->state = "running";
    }
    return http::JsonResponse(201, Dump({{"id", (*e)->id}, {"state", "running"}}));
  });

  router->Add("POST", "/v1/sessions/{id}/functions",
              [session, body_of](const http::Request& r, const http::Params& p) {
                std::shared_ptr<Impl> impl;
                std::shared_ptr<Entry> e;
                if (auto err = session(r, p, &impl, &e)) return *err;
                auto b = body_of(r);
                if (!b.ok()) return ErrorResponse(b.status());
                auto named = NameOf(*b);
                if (!named.ok()) return ErrorResponse(named.status());
                const std::string name = *named;
                if (name.empty())
                  return http::JsonError(400, "name: the function's name is missing", "", "name");
                auto spec = SpecOf(*b, name);
                if (!spec.ok()) return ErrorResponse(spec.status());
                auto fn = rt::SemanticFunction::Parse(*spec);
                if (!fn.ok()) return ErrorResponse(fn.status());
                json inputs = (*fn)->inputs(), outputs = json::array();
                for (const auto& o : (*fn)->outputs()) outputs.push_back(o.name);
                auto lock = BuildLock(*e);
                if (!lock.owns_lock()) return Busy();
                if (e->functions.size() >= impl->options.dag_limits.max_functions)
                  return ErrorResponse(Status::TooLarge(
                      "a session has at most " +
                      std::to_string(impl->options.dag_limits.max_functions) + " functions"));
                e->functions[name] = *fn;
                return http::JsonResponse(
                    201, Dump({{"name", name}, {"inputs", inputs}, {"outputs", outputs}}));
              });

  router->Add(
      "POST", "/v1/sessions/{id}/calls",
      [session, body_of](const http::Request& r, const http::Params& p) {
        std::shared_ptr<Impl> impl;
        std::shared_ptr<Entry> e;
        if (auto err = session(r, p, &impl, &e)) return *err;
        auto b = body_of(r);
        if (!b.ok()) return ErrorResponse(b.status());
        auto lock = BuildLock(*e);
        if (!lock.owns_lock()) return Busy();
        std::shared_ptr<const rt::SemanticFunction> fn;
        if (auto f = b->find("function"); f != b->end() && f->is_string()) {
          auto it = e->functions.find(f->get<std::string>());
          if (it == e->functions.end())
            return http::JsonError(
                400, "function: no function '" + f->get<std::string>() + "' in this session", "",
                "function");
          fn = it->second;
        } else {
          auto spec = SpecOf(*b, "call" + std::to_string(e->calls + 1));
          if (!spec.ok()) return ErrorResponse(spec.status());
          auto parsed = rt::SemanticFunction::Parse(*spec);
          if (!parsed.ok()) return ErrorResponse(parsed.status());
          fn = *parsed;
        }
        if (static_cast<size_t>(e->calls) >= impl->options.dag_limits.max_nodes)
          return ErrorResponse(Status::TooLarge("a session has at most " +
                                                std::to_string(impl->options.dag_limits.max_nodes) +
                                                " calls"));
        std::map<std::string, rt::Arg> args;
        if (auto in = b->find("inputs"); in != b->end()) {
          if (!in->is_object())
            return http::JsonError(400, "inputs: must be an object", "", "inputs");
          for (const auto& [name, v] : in->items()) {
            if (v.is_string()) {
              args[name] = rt::Arg::Text(v.get<std::string>());
            } else if (v.is_object() && v.contains("var") && v["var"].is_number_unsigned()) {
              const rt::VarId id = v["var"].get<rt::VarId>();
              if (!KnownVar(*e->run, id))
                return http::JsonError(
                    400, "inputs." + name + ": no variable " + std::to_string(id), "", "inputs");
              args[name] = rt::Arg::Var(id);
            } else {
              return http::JsonError(400, "inputs." + name + ": must be text or {\"var\": ID}", "",
                                     "inputs");
            }
          }
        }
        auto outs = e->run->Call(*fn, args, rt::CallKey{"session", e->calls});
        if (!outs.ok()) return ErrorResponse(outs.status());
        ++e->calls;
        json o = json::object();
        for (const auto& [name, v] : *outs) o[name] = v;
        return http::JsonResponse(201, Dump({{"outputs", o}}));
      });

  router->Add("POST", "/v1/sessions/{id}/vars",
              [session, body_of](const http::Request& r, const http::Params& p) {
                std::shared_ptr<Impl> impl;
                std::shared_ptr<Entry> e;
                if (auto err = session(r, p, &impl, &e)) return *err;
                auto b = body_of(r);
                if (!b.ok()) return ErrorResponse(b.status());
                auto name = NameOf(*b);
                if (!name.ok()) return ErrorResponse(name.status());
                auto lock = BuildLock(*e);
                if (!lock.owns_lock()) return Busy();
                rt::VarId v = 0;
                if (auto val = b->find("value"); val != b->end() && !val->is_null()) {
                  if (!val->is_string())
                    return http::JsonError(400, "value: must be a string", "", "value");
                  v = e->run->Literal(val->get<std::string>(), *name);
                } else {
                  v = e->run->HostVar(*name, {});
                }
                return http::JsonResponse(201, Dump({{"var", v}, {"name", *name}}));
              });

  router->Add("PUT", "/v1/sessions/{id}/vars/{var}",
              [session, body_of](const http::Request& r, const http::Params& p) {
                std::shared_ptr<Impl> impl;
                std::shared_ptr<Entry> e;
                if (auto err = session(r, p, &impl, &e)) return *err;
                auto v = ParseVarId(p.at("var"));
                if (!v.ok()) return ErrorResponse(v.status());
                auto b = body_of(r);
                if (!b.ok()) return ErrorResponse(b.status());
                auto lock = BuildLock(*e);
                if (!lock.owns_lock()) return Busy();
                Status s;
                if (auto val = b->find("value"); val != b->end() && val->is_string()) {
                  s = e->run->SetValue(*v, val->get<std::string>());
                } else if (auto er = b->find("error"); er != b->end() && er->is_string()) {
                  s = e->run->SetFailed(*v, er->get<std::string>());
                } else {
                  return http::JsonError(400, "give {\"value\": TEXT} or {\"error\": TEXT}");
                }
                if (!s.ok()) return ErrorResponse(s);
                return http::JsonResponse(
                    200, Dump({{"var", *v}, {"state", rt::VarStateName(e->run->state(*v))}}));
              });

  router->Add(
      "GET", "/v1/sessions/{id}/vars/{var}",
      [session](const http::Request& r, const http::Params& p) {
        std::shared_ptr<Impl> impl;
        std::shared_ptr<Entry> e;
        if (auto err = session(r, p, &impl, &e)) return *err;
        auto v = ParseVarId(p.at("var"));
        if (!v.ok()) return ErrorResponse(v.status());
        if (!KnownVar(*e->run, *v)) return http::JsonError(404, "no variable " + p.at("var"));
        rt::GetOptions get;
        if (auto c = r.query.find("criteria"); c != r.query.end()) {
          if (c->second == "latency") {
            get.criteria = rt::Criteria::kLatency;
          } else if (c->second != "throughput") {
            return http::JsonError(400, "criteria: latency or throughput", "", "criteria");
          }
        }
        auto number = [&](const char* key, double def, double lo,
                          double hi) -> std::optional<double> {
          auto it = r.query.find(key);
          if (it == r.query.end()) return def;
          char* end = nullptr;
          const double x = std::strtod(it->second.c_str(), &end);
          if (it->second.empty() || *end || !(x >= lo && x <= hi)) return std::nullopt;
          return x;
        };
        auto deadline = number("deadline_ms", 0, 0, 86400e3);
        auto timeout = number("timeout_ms", 30000, 0, impl->options.max_wait_ms);
        if (!deadline)
          return http::JsonError(400, "deadline_ms: a number in [0, 86400000]", "", "deadline_ms");
        if (!timeout)
          return http::JsonError(
              400, "timeout_ms: a number in [0, " + std::to_string(impl->options.max_wait_ms) + "]",
              "", "timeout_ms");
        if (*deadline > 0) get.deadline_ms = *deadline;
        {
          auto lock = BuildLock(*e);
          if (!lock.owns_lock()) return Busy();
          if (Status s = e->run->Want(*v, get); !s.ok()) return ErrorResponse(s);
        }
        const int64_t until = SteadyMs() + static_cast<int64_t>(*timeout);
        const auto gone = r.client_gone;  // a client that left stops the wait
        while (e->run->state(*v) == rt::VarState::kPending && !impl->stopping &&
               !(gone && gone->gone())) {
          const int64_t left = until - SteadyMs();
          if (left <= 0) break;
          e->run->WaitAny({*v}, static_cast<int>(std::min<int64_t>(left, 200)));
        }
        e->last_used_ms = SteadyMs();
        const rt::VarState st = e->run->state(*v);
        json j = {{"var", *v}, {"state", rt::VarStateName(st)}};
        if (st == rt::VarState::kReady) j["value"] = e->run->value(*v);
        if (st == rt::VarState::kFailed || st == rt::VarState::kCancelled)
          j["error"] = e->run->error(*v);
        // Still pending at the timeout: 202, ask again.
        return http::JsonResponse(st == rt::VarState::kPending ? 202 : 200, Dump(j));
      });

  // Lua inputs in the session (braid repl --server), and stopping one.
  router->Add("POST", "/v1/sessions/{id}/eval",
              [session, body_of](const http::Request& r, const http::Params& p) {
                std::shared_ptr<Impl> impl;
                std::shared_ptr<Entry> e;
                if (auto err = session(r, p, &impl, &e)) return *err;
                auto b = body_of(r);
                if (!b.ok()) return ErrorResponse(b.status());
                return impl->Evaluate(e, *b);
              });
  router->Add("POST", "/v1/sessions/{id}/interrupt",
              [session](const http::Request& r, const http::Params& p) {
                std::shared_ptr<Impl> impl;
                std::shared_ptr<Entry> e;
                if (auto err = session(r, p, &impl, &e)) return *err;
                const bool running = e->evaluating.load();
                if (running) e->eval_interrupt = true;
                return http::JsonResponse(200, Dump({{"interrupted", running}}));
              });

  router->Add("DELETE", "/v1/sessions/{id}",
              [session](const http::Request& r, const http::Params& p) {
                std::shared_ptr<Impl> impl;
                std::shared_ptr<Entry> e;
                if (auto err = session(r, p, &impl, &e)) return *err;
                e->eval_interrupt = true;  // an input running stops
                e->run->Cancel();
                e->run->Finish(Status::Ok());
                impl->Complete(e, "done", nullptr, "");
                return http::JsonResponse(200, Dump({{"id", e->id}, {"state", "done"}}));
              });
}

}  // namespace braid::server

namespace braid::server {

http::Response RunsService::Impl::Evaluate(const std::shared_ptr<Entry>& e, const json& b) {
  auto src = b.find("source");
  if (src == b.end() || !src->is_string())
    return http::JsonError(400, "source: the Lua input is missing", "", "source");
  std::string source = src->get<std::string>();
  if (source.size() > options.max_source_bytes)
    return http::JsonError(
        413, "source: larger than " + std::to_string(options.max_source_bytes) + " bytes");
  std::string name;  // empty: the driver names the chunk by its number ("input3")
  if (auto n = b.find("name"); n != b.end() && !n->is_null()) {
    if (!n->is_string() || n->get<std::string>().empty())
      return http::JsonError(400, "name: must be a non-empty string", "", "name");
    name = n->get<std::string>();
  }
  bool program = false, sse = false;
  for (auto [key, flag] : {std::pair<const char*, bool*>{"program", &program}, {"stream", &sse}})
    if (auto f = b.find(key); f != b.end() && !f->is_null()) {
      if (!f->is_boolean())
        return http::JsonError(400, std::string(key) + ": must be true or false", "", key);
      *flag = f->get<bool>();
    }
  std::vector<std::string> args;
  if (auto a = b.find("args"); a != b.end() && !a->is_null()) {
    if (!a->is_array()) return http::JsonError(400, "args: must be a list of strings", "", "args");
    for (const json& x : *a) {
      if (!x.is_string())
        return http::JsonError(400, "args: must be a list of strings", "", "args");
      args.push_back(x.get<std::string>());
    }
  }
  if (draining) return Stopping();
  if (e->evaluating.exchange(true))
    return http::JsonError(409, "an input is already being evaluated in this session");

  auto stream = std::make_shared<http::EventStream>();
  std::weak_ptr<Entry> weak = e;
  // A client that leaves stops its input (the session stays).
  stream->OnCancel([weak] {
    if (auto entry = weak.lock()) entry->eval_interrupt = true;
  });
  e->eval_interrupt = false;
  if (sse) {
    std::lock_guard<std::mutex> lock(e->mu);
    e->eval_stream = stream;
  }
  std::weak_ptr<Impl> self = weak_from_this();
  auto job = [self, e, stream, sse, program, name = std::move(name), source = std::move(source),
              args = std::move(args)] {
    auto impl = self.lock();
    json answer;
    // A stopping server starts no queued input (BeginDrain).
    if (impl && !impl->stopping && !impl->draining) {
      std::unique_lock<std::timed_mutex> lock(e->build_mu);
      if (!e->driver) {
        lua::DriverOptions d;
        d.limits = impl->options.lua_limits;
        d.limits.take_memory = TakeMemory(e->account);
        e->lua = lua::LuaState::Create(d.limits);
        d.interrupt = &e->eval_interrupt;
        d.script_dir.clear();  // as for programs: no file access
        d.read_files = false;
        Entry* raw = e.get();
        std::weak_ptr<Impl> weak_impl = impl;
        d.log = [weak_impl, raw](std::string_view line) {
          if (auto i = weak_impl.lock())
            i->Broadcast(*raw, {{"type", "log"}, {"text", std::string(line)}});
        };
        if (e->lua) e->driver = std::make_unique<lua::Driver>(*e->run, *e->lua, d);
      }
      Result<std::vector<std::string>> r =
          !e->driver ? Result<std::vector<std::string>>(
                           Status::ResourceExhausted("cannot create a Lua state"))
          : program ? e->driver->EvaluateProgram(name, source, args)
                    : e->driver->Evaluate(name, source);
      if (r.ok()) {
        answer = {{"values", *r}};
      } else {
        const Status& s = r.status();
        const char* code =
            s.code() == StatusCode::kCancelled           ? "interrupted"
            : s.code() == StatusCode::kResourceExhausted ? "limit"
            : s.code() == StatusCode::kInvalidArgument && lua::Driver::IsIncomplete(s.message())
                ? "incomplete"
                : "error";
        answer = {{"error", s.message()}, {"code", code}};
      }
    } else {
      answer = {{"error", "the server is stopping"}, {"code", "interrupted"}};
    }
    e->last_used_ms = SteadyMs();
    {
      std::lock_guard<std::mutex> lock(e->mu);
      e->eval_stream.reset();
    }
    // The answer whole, whatever its size (Finish, not Send).
    if (sse) {
      answer["type"] = "result";
      stream->Finish(http::SseEvent(Dump(answer)) + http::SseEvent("[DONE]"));
    } else {
      stream->Finish(Dump(answer));
    }
    e->evaluating = false;
  };
  if (!pool.TrySubmit(e->client, std::move(job))) {
    {
      std::lock_guard<std::mutex> lock(e->mu);
      e->eval_stream.reset();
    }
    e->evaluating = false;
    http::Response busy = http::JsonError(429, "too many programs and inputs running; try again");
    busy.headers.emplace_back("Retry-After", "1");
    return busy;
  }
  http::Response res;
  res.stream = stream;
  res.content_type = sse ? "text/event-stream" : "application/json";
  return res;
}

}  // namespace braid::server
