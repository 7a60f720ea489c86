// The session routes (/v1/sessions/...), the incremental API after
// Parrot's: a session is a run that a client builds call by call over HTTP.
// It registers templates, adds calls whose inputs are literal text or
// variables it holds, creates variables it sets itself, and reads variables
// with a goal, blocking up to a timeout; or it feeds the session Lua inputs
// (braid repl --server).
#include <nlohmann/json.hpp>

#include "server/routes.h"
#include "server/runs_impl.h"

namespace braid::server {

using nlohmann::json;

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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

// POST /v1/sessions: a new session, running.
http::Response CreateSession(RouteContext& c, const http::Request& r, const http::Params&) {
  auto name = NameOf(c.body);
  if (!name.ok()) return ErrorResponse(name.status());
  http::Response refusal;
  auto account = c.impl->Admit(r.client, size_t{1} << 20, &refusal);
  if (!account) return refusal;
  auto e = c.impl->Start("session", *name, "", {}, r.client, {{"kind", "session"}, {"name", *name}},
                         std::move(account));
  if (!e.ok()) return ErrorResponse(e.status());
  {
    std::lock_guard<std::mutex> lock((*e)->mu);
    (*e)->state = "running";
  }
  return http::JsonResponse(201, Dump({{"id", (*e)->id}, {"state", "running"}}));
}

// POST /v1/sessions/{id}/functions: a named template of the session.
http::Response AddFunction(RouteContext& c, const http::Request&, const http::Params&) {
  auto named = NameOf(c.body);
  if (!named.ok()) return ErrorResponse(named.status());
  const std::string name = *named;
  if (name.empty()) return http::JsonError(400, "name: the function's name is missing", "", "name");
  auto spec = SpecOf(c.body, name);
  if (!spec.ok()) return ErrorResponse(spec.status());
  auto fn = rt::SemanticFunction::Parse(*spec);
  if (!fn.ok()) return ErrorResponse(fn.status());
  json inputs = (*fn)->inputs(), outputs = json::array();
  for (const auto& o : (*fn)->outputs()) outputs.push_back(o.name);
  Entry& e = *c.session;
  auto lock = BuildLock(e);
  if (!lock.owns_lock()) return Busy();
  const size_t max_functions = c.impl->options.dag_limits.max_functions;
  if (e.functions.size() >= max_functions)
    return ErrorResponse(
        Status::TooLarge("a session has at most " + std::to_string(max_functions) + " functions"));
  e.functions[name] = *fn;
  return http::JsonResponse(201, Dump({{"name", name}, {"inputs", inputs}, {"outputs", outputs}}));
}

// A call's function: one the session registered ("function": NAME) or a
// template of its own; or the error answer.
std::optional<http::Response> CallFunction(Entry& e, const json& b,
                                           std::shared_ptr<const rt::SemanticFunction>* fn) {
  if (auto f = b.find("function"); f != b.end() && f->is_string()) {
    auto it = e.functions.find(f->get<std::string>());
    if (it == e.functions.end())
      return http::JsonError(
          400, "function: no function '" + f->get<std::string>() + "' in this session", "",
          "function");
    *fn = it->second;
    return std::nullopt;
  }
  auto spec = SpecOf(b, "call" + std::to_string(e.calls + 1));
  if (!spec.ok()) return ErrorResponse(spec.status());
  auto parsed = rt::SemanticFunction::Parse(*spec);
  if (!parsed.ok()) return ErrorResponse(parsed.status());
  *fn = *parsed;
  return std::nullopt;
}

// A call's inputs: text, or {"var": ID} of a variable the session holds;
// or the error answer.
std::optional<http::Response> CallArgs(Entry& e, const json& b,
                                       std::map<std::string, rt::Arg>* args) {
  auto in = b.find("inputs");
  if (in == b.end()) return std::nullopt;
  if (!in->is_object()) return http::JsonError(400, "inputs: must be an object", "", "inputs");
  for (const auto& [name, v] : in->items()) {
    if (v.is_string()) {
      (*args)[name] = rt::Arg::Text(v.get<std::string>());
    } else if (v.is_object() && v.contains("var") && v["var"].is_number_unsigned()) {
      const rt::VarId id = v["var"].get<rt::VarId>();
      if (!KnownVar(*e.run, id))
        return http::JsonError(400, "inputs." + name + ": no variable " + std::to_string(id), "",
                               "inputs");
      (*args)[name] = rt::Arg::Var(id);
    } else {
      return http::JsonError(400, "inputs." + name + ": must be text or {\"var\": ID}", "",
                             "inputs");
    }
  }
  return std::nullopt;
}

// POST /v1/sessions/{id}/calls: a call added to the session's DAG; its
// output variables come back.
http::Response AddCall(RouteContext& c, const http::Request&, const http::Params&) {
  Entry& e = *c.session;
  auto lock = BuildLock(e);
  if (!lock.owns_lock()) return Busy();
  std::shared_ptr<const rt::SemanticFunction> fn;
  if (auto err = CallFunction(e, c.body, &fn)) return *err;
  const size_t max_nodes = c.impl->options.dag_limits.max_nodes;
  if (static_cast<size_t>(e.calls) >= max_nodes)
    return ErrorResponse(
        Status::TooLarge("a session has at most " + std::to_string(max_nodes) + " calls"));
  std::map<std::string, rt::Arg> args;
  if (auto err = CallArgs(e, c.body, &args)) return *err;
  auto outs = e.run->Call(*fn, args, rt::CallKey{"session", e.calls});
  if (!outs.ok()) return ErrorResponse(outs.status());
  ++e.calls;
  json o = json::object();
  for (const auto& [name, v] : *outs) o[name] = v;
  return http::JsonResponse(201, Dump({{"outputs", o}}));
}

// POST /v1/sessions/{id}/vars: a variable the client sets (now, with
// "value", or later with PUT).
http::Response NewVar(RouteContext& c, const http::Request&, const http::Params&) {
  auto name = NameOf(c.body);
  if (!name.ok()) return ErrorResponse(name.status());
  Entry& e = *c.session;
  auto lock = BuildLock(e);
  if (!lock.owns_lock()) return Busy();
  rt::VarId v = 0;
  if (auto val = c.body.find("value"); val != c.body.end() && !val->is_null()) {
    if (!val->is_string()) return http::JsonError(400, "value: must be a string", "", "value");
    v = e.run->Literal(val->get<std::string>(), *name);
  } else {
    v = e.run->HostVar(*name, {});
  }
  return http::JsonResponse(201, Dump({{"var", v}, {"name", *name}}));
}

// PUT /v1/sessions/{id}/vars/{var}: a variable's value, or its failure.
http::Response SetVar(RouteContext& c, const http::Request&, const http::Params&) {
  Entry& e = *c.session;
  auto lock = BuildLock(e);
  if (!lock.owns_lock()) return Busy();
  Status s;
  if (auto val = c.body.find("value"); val != c.body.end() && val->is_string()) {
    s = e.run->SetValue(c.var, val->get<std::string>());
  } else if (auto er = c.body.find("error"); er != c.body.end() && er->is_string()) {
    s = e.run->SetFailed(c.var, er->get<std::string>());
  } else {
    return http::JsonError(400, "give {\"value\": TEXT} or {\"error\": TEXT}");
  }
  if (!s.ok()) return ErrorResponse(s);
  return http::JsonResponse(
      200, Dump({{"var", c.var}, {"state", rt::VarStateName(e.run->state(c.var))}}));
}

// GET .../vars/{var}'s query: the goal (criteria, deadline_ms) and how long
// to wait (timeout_ms, at most RunsOptions::max_wait_ms); or the error answer.
std::optional<http::Response> ReadOptions(const http::Request& r, int max_wait_ms,
                                          rt::GetOptions* get, double* timeout_ms) {
  if (auto c = r.query.find("criteria"); c != r.query.end()) {
    if (c->second == "latency") {
      get->criteria = rt::Criteria::kLatency;
    } else if (c->second != "throughput") {
      return http::JsonError(400, "criteria: latency or throughput", "", "criteria");
    }
  }
  auto number = [&](const char* key, double def, double lo, double hi) -> std::optional<double> {
    auto it = r.query.find(key);
    if (it == r.query.end()) return def;
    char* end = nullptr;
    const double x = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end || !(x >= lo && x <= hi)) return std::nullopt;
    return x;
  };
  auto deadline = number("deadline_ms", 0, 0, 86400e3);
  auto timeout = number("timeout_ms", 30000, 0, max_wait_ms);
  if (!deadline)
    return http::JsonError(400, "deadline_ms: a number in [0, 86400000]", "", "deadline_ms");
  if (!timeout)
    return http::JsonError(400, "timeout_ms: a number in [0, " + std::to_string(max_wait_ms) + "]",
                           "", "timeout_ms");
  if (*deadline > 0) get->deadline_ms = *deadline;
  *timeout_ms = *timeout;
  return std::nullopt;
}

// GET /v1/sessions/{id}/vars/{var}: the variable wanted with the goal, and
// its value once ready, waited for up to the timeout (202 while pending).
http::Response GetVar(RouteContext& c, const http::Request& r, const http::Params& p) {
  Entry& e = *c.session;
  const rt::VarId v = c.var;
  if (!KnownVar(*e.run, v)) return http::JsonError(404, "no variable " + p.at("var"));
  rt::GetOptions get;
  double timeout = 0;
  if (auto err = ReadOptions(r, c.impl->options.max_wait_ms, &get, &timeout)) return *err;
  {
    auto lock = BuildLock(e);
    if (!lock.owns_lock()) return Busy();
    if (Status s = e.run->Want(v, get); !s.ok()) return ErrorResponse(s);
  }
  const int64_t until = SteadyMs() + static_cast<int64_t>(timeout);
  const auto gone = r.client_gone;  // a client that left stops the wait
  while (e.run->state(v) == rt::VarState::kPending && !c.impl->stopping &&
         !(gone && gone->gone())) {
    const int64_t left = until - SteadyMs();
    if (left <= 0) break;
    e.run->WaitAny({v}, static_cast<int>(std::min<int64_t>(left, 200)));
  }
  e.last_used_ms = SteadyMs();
  const rt::VarState st = e.run->state(v);
  json j = {{"var", v}, {"state", rt::VarStateName(st)}};
  if (st == rt::VarState::kReady) j["value"] = e.run->value(v);
  if (st == rt::VarState::kFailed || st == rt::VarState::kCancelled) j["error"] = e.run->error(v);
  // Still pending at the timeout: 202, ask again.
  return http::JsonResponse(st == rt::VarState::kPending ? 202 : 200, Dump(j));
}

// POST /v1/sessions/{id}/interrupt: stops the Lua input running, if any.
http::Response Interrupt(RouteContext& c, const http::Request&, const http::Params&) {
  const bool running = c.session->evaluating.load();
  if (running) c.session->eval_interrupt = true;
  return http::JsonResponse(200, Dump({{"interrupted", running}}));
}

// DELETE /v1/sessions/{id}: the session ends, done.
http::Response CloseSession(RouteContext& c, const http::Request&, const http::Params&) {
  const std::shared_ptr<Entry>& e = c.session;
  e->eval_interrupt = true;  // an input running stops
  e->run->Cancel();
  e->run->Finish(Status::Ok());
  c.impl->Complete(e, "done", nullptr, "");
  return http::JsonResponse(200, Dump({{"id", e->id}, {"state", "done"}}));
}

}  // namespace

void AddSessionRoutes(const std::weak_ptr<RunsService::Impl>& service, http::Router* router) {
  auto add = [&](const char* method, const char* path, unsigned needs, RouteHandler fn) {
    router->Add(method, path, Route(service, needs, std::move(fn)));
  };
  add("POST", "/v1/sessions", kNewWork | kOptionalBody, CreateSession);
  add("POST", "/v1/sessions/{id}/functions", kSession | kOptionalBody, AddFunction);
  add("POST", "/v1/sessions/{id}/calls", kSession | kOptionalBody, AddCall);
  add("POST", "/v1/sessions/{id}/vars", kSession | kOptionalBody, NewVar);
  add("PUT", "/v1/sessions/{id}/vars/{var}", kSession | kVar | kOptionalBody, SetVar);
  add("GET", "/v1/sessions/{id}/vars/{var}", kSession | kVar, GetVar);
  // Lua inputs in the session (braid repl --server), and stopping one.
  add("POST", "/v1/sessions/{id}/eval", kSession | kOptionalBody,
      [](RouteContext& c, const http::Request&, const http::Params&) {
        return c.impl->Evaluate(c.session, c.body);
      });
  add("POST", "/v1/sessions/{id}/interrupt", kSession, Interrupt);
  add("DELETE", "/v1/sessions/{id}", kSession, CloseSession);
}

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

namespace {

// A Lua input of POST /v1/sessions/{id}/eval.
struct EvalInput {
  std::string source;
  std::string name;      // empty: the driver names the chunk by its number ("input3")
  bool program = false;  // run as a program file (the function it returns gets args)
  bool sse = false;      // answer with the run's events, then the result
  std::vector<std::string> args;
};

// The body's {source, name?, program?, stream?, args?}; or the error answer.
std::optional<http::Response> ReadEvalInput(const json& b, size_t max_source_bytes, EvalInput* in) {
  auto src = b.find("source");
  if (src == b.end() || !src->is_string())
    return http::JsonError(400, "source: the Lua input is missing", "", "source");
  in->source = src->get<std::string>();
  if (in->source.size() > max_source_bytes)
    return http::JsonError(413,
                           "source: larger than " + std::to_string(max_source_bytes) + " bytes");
  if (auto n = b.find("name"); n != b.end() && !n->is_null()) {
    if (!n->is_string() || n->get<std::string>().empty())
      return http::JsonError(400, "name: must be a non-empty string", "", "name");
    in->name = n->get<std::string>();
  }
  for (auto [key, flag] :
       {std::pair<const char*, bool*>{"program", &in->program}, {"stream", &in->sse}})
    if (auto f = b.find(key); f != b.end() && !f->is_null()) {
      if (!f->is_boolean())
        return http::JsonError(400, std::string(key) + ": must be true or false", "", key);
      *flag = f->get<bool>();
    }
  if (auto a = b.find("args"); a != b.end() && !a->is_null()) {
    if (!a->is_array()) return http::JsonError(400, "args: must be a list of strings", "", "args");
    for (const json& x : *a) {
      if (!x.is_string())
        return http::JsonError(400, "args: must be a list of strings", "", "args");
      in->args.push_back(x.get<std::string>());
    }
  }
  return std::nullopt;
}

// The session's Lua state and driver, made at its first input (false when
// no Lua state could be made). Called with the builder lock held.
bool EnsureDriver(RunsService::Impl& impl, const std::shared_ptr<Entry>& e) {
  if (e->driver) return true;
  lua::DriverOptions d;
  d.limits = impl.options.lua_limits;
  d.limits.take_memory = TakeMemory(e->account);
  e->lua = lua::LuaState::Create(d.limits);
  d.interrupt = &e->eval_interrupt;
  d.script_dir.clear();  // as for programs: no file access
  d.read_files = false;
  Entry* raw = e.get();
  std::weak_ptr<RunsService::Impl> weak_impl = impl.weak_from_this();
  d.log = [weak_impl, raw](std::string_view line) {
    if (auto i = weak_impl.lock())
      i->Broadcast(*raw, {{"type", "log"}, {"text", std::string(line)}});
  };
  if (e->lua) e->driver = std::make_unique<lua::Driver>(*e->run, *e->lua, d);
  return e->driver != nullptr;
}

// Runs the input in the session under its builder lock: {"values": [...]},
// or {"error", "code"} with code interrupted, limit, incomplete (more
// lines could complete it) or error.
json RunInput(RunsService::Impl& impl, const std::shared_ptr<Entry>& e, const EvalInput& in) {
  std::unique_lock<std::timed_mutex> lock(e->build_mu);
  Result<std::vector<std::string>> r =
      !EnsureDriver(impl, e)
          ? Result<std::vector<std::string>>(Status::ResourceExhausted("cannot create a Lua state"))
      : in.program ? e->driver->EvaluateProgram(in.name, in.source, in.args)
                   : e->driver->Evaluate(in.name, in.source);
  if (r.ok()) return {{"values", *r}};
  const Status& s = r.status();
  const char* code =
      s.code() == StatusCode::kCancelled           ? "interrupted"
      : s.code() == StatusCode::kResourceExhausted ? "limit"
      : s.code() == StatusCode::kInvalidArgument && lua::Driver::IsIncomplete(s.message())
          ? "incomplete"
          : "error";
  return {{"error", s.message()}, {"code", code}};
}

}  // namespace

http::Response RunsService::Impl::Evaluate(const std::shared_ptr<Entry>& e, const json& b) {
  auto in = std::make_shared<EvalInput>();
  if (auto err = ReadEvalInput(b, options.max_source_bytes, in.get())) return *err;
  if (draining) return Stopping();
  if (e->evaluating.exchange(true))
    return http::JsonError(409, "an input is already being evaluated in this session");
  const bool sse = in->sse;
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
  auto job = [self, e, stream, in] {
    auto impl = self.lock();
    // A stopping server starts no queued input (BeginDrain).
    json answer = impl && !impl->stopping && !impl->draining
                      ? RunInput(*impl, e, *in)
                      : json{{"error", "the server is stopping"}, {"code", "interrupted"}};
    e->last_used_ms = SteadyMs();
    {
      std::lock_guard<std::mutex> lock(e->mu);
      e->eval_stream.reset();
    }
    // The session takes its next input before the answer goes out: a
    // client sends the next one as soon as it has read this one.
    e->evaluating = false;
    // The answer whole, whatever its size (Finish, not Send).
    if (in->sse) {
      answer["type"] = "result";
      stream->Finish(http::SseEvent(Dump(answer)) + http::SseEvent("[DONE]"));
    } else {
      stream->Finish(Dump(answer));
    }
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
