#include "http/http_types.h"

#include <nlohmann/json.hpp>

namespace braid::http {

bool ClientGone::gone() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_;
}

void ClientGone::OnGone(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gone_) {
      hooks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void ClientGone::Signal() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_) return;
    gone_ = true;
    hooks.swap(hooks_);
  }
  for (auto& h : hooks) h();
}

bool EventStream::Send(std::string chunk) {
  std::function<void()> waker;
  bool too_slow = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || closed_) return false;
    if (queued_bytes_ + chunk.size() > max_queued_bytes_) {
      too_slow = true;
    } else {
      queued_bytes_ += chunk.size();
      queue_.push_back(std::move(chunk));
      waker = waker_;
    }
  }
  if (too_slow) {  // the client reads slower than we produce: let it go
    Cancel();
    return false;
  }
  if (waker) waker();
  return true;
}

bool EventStream::Finish(std::string last) {
  std::function<void()> waker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || closed_) return false;
    queued_bytes_ += last.size();
    queue_.push_back(std::move(last));
    closed_ = true;
    waker = waker_;
  }
  if (waker) waker();
  return true;
}

void EventStream::Close() {
  std::function<void()> waker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    waker = waker_;
  }
  if (waker) waker();
}

void EventStream::OnCancel(std::function<void()> fn) {
  bool now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) {
      now = true;
    } else {
      on_cancel_ = std::move(fn);
    }
  }
  if (now && fn) fn();
}

bool EventStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void EventStream::SetWaker(std::function<void()> waker) {
  std::lock_guard<std::mutex> lock(mu_);
  waker_ = std::move(waker);
}

void EventStream::Take(std::vector<std::string>* out, bool* closed) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : queue_) out->push_back(std::move(c));
  queue_.clear();
  queued_bytes_ = 0;
  *closed = closed_;
}

void EventStream::Cancel() {
  std::function<void()> fn;
  std::function<void()> waker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || closed_) return;  // a closed stream finished; nothing to stop
    cancelled_ = true;
    queue_.clear();
    queued_bytes_ = 0;
    fn = std::move(on_cancel_);
    on_cancel_ = nullptr;
    waker = waker_;
  }
  if (fn) fn();
  if (waker) waker();
}

std::string SseEvent(std::string_view payload, std::string_view event) {
  std::string out;
  out.reserve(payload.size() + 16);
  if (!event.empty()) {
    out += "event: ";
    out += event;
    out += '\n';
  }
  size_t start = 0;
  while (true) {
    size_t nl = payload.find('\n', start);
    out += "data: ";
    out +=
        payload.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
  return out;
}

namespace {

std::vector<std::string> Segments(std::string_view path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    out.emplace_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

bool Match(const std::vector<std::string>& pattern, const std::vector<std::string>& path,
           Params* params) {
  if (pattern.size() != path.size()) return false;
  Params p;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const std::string& s = pattern[i];
    if (s.size() >= 2 && s.front() == '{' && s.back() == '}') {
      if (path[i].empty()) return false;
      p[s.substr(1, s.size() - 2)] = path[i];
    } else if (s != path[i]) {
      return false;
    }
  }
  if (params) *params = std::move(p);
  return true;
}

std::string DefaultErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 405:
      return "invalid_request_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

void Router::Add(std::string method, std::string pattern, Handler handler) {
  routes_.push_back({std::move(method), Segments(pattern), std::move(handler)});
}

Response Router::Handle(const Request& request) const {
  const std::vector<std::string> path = Segments(request.path);
  std::string allow;
  for (const Route& r : routes_) {
    Params params;
    if (!Match(r.segments, path, &params)) continue;
    if (r.method == request.method) return r.handler(request, params);
    if (allow.find(r.method) == std::string::npos) allow += (allow.empty() ? "" : ", ") + r.method;
  }
  if (allow.empty()) return JsonError(404, "no route for " + request.path, "", "", "not_found");
  Response res = JsonError(405, "method " + request.method + " is not allowed on " + request.path +
                                    " (allowed: " + allow + ")");
  res.headers.emplace_back("Allow", allow);
  return res;
}

Response JsonError(int status, std::string message, std::string type, std::string param,
                   std::string code) {
  nlohmann::json e;
  e["message"] = std::move(message);
  e["type"] = type.empty() ? DefaultErrorType(status) : std::move(type);
  e["param"] = param.empty() ? nlohmann::json() : nlohmann::json(std::move(param));
  e["code"] = code.empty() ? nlohmann::json() : nlohmann::json(std::move(code));
  nlohmann::json body;
  body["error"] = std::move(e);
  return JsonResponse(status, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Response JsonResponse(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace braid::http
