// braid repl --server URL: the inputs run in a session of a braid serve
// (POST /v1/sessions/{id}/eval, docs/http-api.md), so the DAG grows on the
// server, step by step, and its tokens stream back here.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/repl_session.h"
#include "engine/http_client.h"
#include "report/run_report.h"

namespace braid::cli {
namespace {

using nlohmann::json;

constexpr int kLongWaitMs = 24 * 3600 * 1000;  // a get may wait on a busy server

struct Answer {
  int status = 0;
  std::string body;
};

class RemoteSession : public ReplSession {
 public:
  RemoteSession(remote::HttpUrl url, std::string url_text, std::string key,
                const std::atomic<bool>* interrupt)
      : url_(std::move(url)),
        url_text_(std::move(url_text)),
        key_(std::move(key)),
        interrupt_(interrupt) {}
  ~RemoteSession() override {
    if (!id_.empty()) (void)Call("DELETE", "/v1/sessions/" + id_, "");
  }

  Status Open() {
    BRAID_ASSIGN_OR_RETURN(json j, CallJson("POST", "/v1/sessions", R"({"name":"repl"})", 201));
    if (!j.contains("id") || !j["id"].is_string())
      return Status::InvalidArgument(url_text_ + " answered POST /v1/sessions without an id");
    id_ = j["id"].get<std::string>();
    return Status::Ok();
  }

  Result<std::vector<std::string>> Evaluate(const std::string& name, const std::string& source,
                                            bool program, const std::vector<std::string>& args,
                                            const std::string&, const TokenFn& on_tokens) override {
    json body = {{"source", source}, {"program", program}, {"args", args}, {"stream", true}};
    if (!name.empty()) body["name"] = name;  // else the server numbers it ("input3")
    remote::HttpRequestSpec spec = Spec("POST", "/v1/sessions/" + id_ + "/eval", body.dump());
    remote::HttpCall call;
    remote::SseReader sse;
    json result;
    std::string bad;
    // Ctrl-C asks the server to stop the input; its answer then says so.
    std::atomic<bool> over{false};
    std::thread watcher([&] {
      while (!over) {
        if (interrupt_ && interrupt_->load()) {
          (void)Call("POST", "/v1/sessions/" + id_ + "/interrupt", "");
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    const remote::HttpOutcome out = call.Run(url_, spec, [&](std::string_view bytes) {
      std::vector<std::string> events;
      sse.Feed(bytes, &events);
      for (const std::string& data : events) {
        if (data == "[DONE]") continue;
        json e = json::parse(data, nullptr, false);
        if (!e.is_object() || !e.contains("type")) {
          bad = "the server sent an event that is not a JSON object: " + data.substr(0, 200);
          continue;
        }
        const std::string type = e["type"].is_string() ? e["type"].get<std::string>() : "";
        if (type == "tokens" && on_tokens && e["text"].is_string()) {
          on_tokens(e.value("var", uint64_t{0}), e["text"].get<std::string>());
        } else if (type == "log" && e["text"].is_string()) {
          std::printf("%s\n", e["text"].get<std::string>().c_str());
          std::fflush(stdout);
        } else if (type == "result") {
          result = std::move(e);
        }
      }
      return kLongWaitMs;
    });
    over = true;
    watcher.join();
    if (out.failure != remote::HttpFailure::kNone && result.is_null())
      return Status::IoError(url_text_ + ": " + out.error);
    if (out.status != 200)
      return Status::InvalidArgument(url_text_ + " refused the input (" +
                                     std::to_string(out.status) +
                                     "): " + remote::ErrorBodyMessage(out.error_body));
    if (result.is_null())
      return Status::IoError(url_text_ + ": the answer ended without a result" +
                             (bad.empty() ? "" : " (" + bad + ")"));
    if (auto v = result.find("values"); v != result.end() && v->is_array()) {
      std::vector<std::string> values;
      for (const json& x : *v) values.push_back(x.is_string() ? x.get<std::string>() : x.dump());
      return values;
    }
    const std::string message = result.value("error", std::string("the input failed"));
    const std::string code = result.value("code", std::string("error"));
    if (code == "interrupted") return Status::Cancelled(message);
    if (code == "limit") return Status::ResourceExhausted(message);
    return Status::InvalidArgument(message);
  }

  std::string run_id() const override { return id_; }

  Result<std::vector<ReplVar>> Vars(const std::string& run) override {
    BRAID_ASSIGN_OR_RETURN(json j, CallJson("GET", "/v1/runs/" + RunOf(run), "", 200));
    std::map<uint64_t, std::string> labels;
    if (auto nodes = j.find("nodes"); nodes != j.end() && nodes->is_array())
      for (const json& n : *nodes)
        if (n.is_object()) labels[n.value("id", uint64_t{0})] = n.value("label", std::string());
    std::vector<ReplVar> out;
    if (auto vars = j.find("vars"); vars != j.end() && vars->is_array()) {
      for (const json& v : *vars) {
        ReplVar x;
        x.id = v.value("id", uint64_t{0});
        x.name = v.value("name", std::string());
        x.node = v.value("producer", uint64_t{0});
        if (x.node) x.label = labels[x.node];
        x.state = v.value("state", std::string());
        x.text =
            v.contains("value") ? v.value("value", std::string()) : v.value("error", std::string());
        out.push_back(std::move(x));
      }
    }
    return out;
  }

  Result<std::vector<std::string>> Runs() override {
    BRAID_ASSIGN_OR_RETURN(json j, CallJson("GET", "/v1/runs?limit=20", "", 200));
    std::vector<std::string> lines;
    if (auto runs = j.find("runs"); runs != j.end() && runs->is_array()) {
      for (const json& r : *runs) {
        const std::string id = r.value("id", std::string());
        std::string line =
            id + "  " + r.value("kind", std::string()) + ", " + r.value("state", std::string());
        if (const std::string c = r.value("client", std::string()); !c.empty())
          line += ", client " + c;
        if (id == id_) line += "  (this session)";
        lines.push_back(std::move(line));
      }
    }
    return lines;
  }

  Status Graph(const std::string& run, const std::string& path) override {
    const size_t dot = path.find_last_of('.');
    const std::string ext = dot == std::string::npos ? "" : path.substr(dot + 1);
    const bool svg = ext == "svg";
    const std::string target = "/v1/runs/" + RunOf(run) + "/graph" + (svg ? "" : "?format=dot");
    BRAID_ASSIGN_OR_RETURN(Answer a, Call("GET", target, ""));
    if (a.status != 200)
      return Status::InvalidArgument("GET " + target + ": " + remote::ErrorBodyMessage(a.body));
    if (svg || ext.empty() || ext == "dot" || ext == "gv") {
      std::ofstream out(path, std::ios::binary);
      out << a.body;
      if (!out) return Status::IoError("cannot write " + path);
      return Status::Ok();
    }
    return report::RenderDot(a.body, ext, path);
  }

  Result<std::vector<std::string>> Stats() override {
    BRAID_ASSIGN_OR_RETURN(json j, CallJson("GET", "/v1/stats", "", 200));
    std::vector<std::string> lines;
    const json& samples = j["samples"];
    if (!samples.is_array() || samples.empty()) return lines;
    const json& last = samples.back();
    const json& labels = j["engines"];
    for (size_t e = 0; e < last["engines"].size(); ++e) {
      const json& s = last["engines"][e];
      char line[512];
      std::snprintf(
          line, sizeof line,
          "%s: %llu requests, %llu prompt tokens (%llu from the prefix cache), %llu generated, "
          "%d running, %d waiting, KV blocks %d of %d in use",
          e < labels.size() ? labels[e].value("name", std::string()).c_str() : "engine",
          s.value("requests_finished", 0ULL), s.value("prompt_tokens", 0ULL),
          s.value("cached_prompt_tokens", 0ULL), s.value("generated_tokens", 0ULL),
          s.value("running", 0), s.value("waiting", 0), s.value("kv_blocks_used", 0),
          s.value("kv_blocks_total", 0));
      lines.push_back(line);
    }
    if (const json& runs = last["runs"]; runs.is_object())
      lines.push_back("runs: " + std::to_string(runs.value("running", 0)) + " running, " +
                      std::to_string(runs.value("queued", 0)) + " queued, " +
                      std::to_string(runs.value("done", 0)) + " done, " +
                      std::to_string(runs.value("failed", 0)) + " failed");
    return lines;
  }

  Result<std::vector<std::string>> Models() override {
    BRAID_ASSIGN_OR_RETURN(json j, CallJson("GET", "/v1/stats", "", 200));
    std::vector<std::string> lines;
    for (const json& e : j["engines"])
      lines.push_back(e.value("name", std::string()) + ": " + e.value("model", std::string()) +
                      " (" + e.value("device", std::string()) + ")");
    return lines;
  }

  std::string Banner() const override { return "server " + url_text_ + "; session " + id_; }

 private:
  std::string RunOf(const std::string& run) const { return run.empty() ? id_ : run; }

  remote::HttpRequestSpec Spec(const std::string& method, const std::string& target,
                               const std::string& body) const {
    remote::HttpRequestSpec spec;
    spec.method = method;
    spec.target = url_.base_path + target;
    spec.body = body;
    spec.connect_timeout_ms = 5000;
    spec.first_timeout_ms = 30000;
    if (!key_.empty()) spec.headers.emplace_back("Authorization", "Bearer " + key_);
    return spec;
  }

  // One exchange: the status and the whole body (of an error too).
  Result<Answer> Call(const std::string& method, const std::string& target,
                      const std::string& body) const {
    remote::HttpCall call;
    Answer a;
    const remote::HttpOutcome out =
        call.Run(url_, Spec(method, target, body), [&](std::string_view bytes) {
          a.body.append(bytes);
          return 30000;
        });
    if (out.failure != remote::HttpFailure::kNone)
      return Status::IoError(url_text_ + ": " + out.error);
    a.status = out.status;
    if (a.status < 200 || a.status >= 300) a.body = out.error_body;
    return a;
  }

  Result<json> CallJson(const std::string& method, const std::string& target,
                        const std::string& body, int want) const {
    BRAID_ASSIGN_OR_RETURN(Answer a, Call(method, target, body));
    if (a.status != want)
      return Status::InvalidArgument(method + " " + url_text_ + target + ": " +
                                     std::to_string(a.status) + " " +
                                     remote::ErrorBodyMessage(a.body));
    json j = json::parse(a.body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return Status::InvalidArgument(method + " " + target + ": the answer is not a JSON object");
    return j;
  }

  remote::HttpUrl url_;
  std::string url_text_, key_;
  const std::atomic<bool>* interrupt_;
  std::string id_;
};

}  // namespace

Result<std::unique_ptr<ReplSession>> OpenRemoteReplSession(const std::string& url,
                                                           const std::string& api_key,
                                                           const std::atomic<bool>* interrupt) {
  BRAID_ASSIGN_OR_RETURN(remote::HttpUrl parsed, remote::ParseHttpUrl(url));
  auto session = std::make_unique<RemoteSession>(parsed, url, api_key, interrupt);
  BRAID_RETURN_IF_ERROR(session->Open());
  return std::unique_ptr<ReplSession>(std::move(session));
}

}  // namespace braid::cli
