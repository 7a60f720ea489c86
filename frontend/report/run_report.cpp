#include "report/run_report.h"

#include <cstdio>
#include <filesystem>

namespace braid::report {
namespace {

bool WriteFile(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

Status RenderDot(const std::string& dot, const std::string& format, const std::string& path) {
  // At the command line the user waits as long as dot takes; dot still
  // dies with braid.
  DotLimits unlimited;
  unlimited.timeout_ms = 0;
  unlimited.max_input_bytes = 0;
  unlimited.max_output_bytes = 0;
  BRAID_ASSIGN_OR_RETURN(std::string out, RunDot(dot, format, unlimited));
  if (!WriteFile(path, out)) return Status::IoError("cannot write " + path);
  return Status::Ok();
}

void WriteGraph(const rt::Run& run, const std::string& path) {
  std::string dot = run.ToDot();
  std::string ext = std::filesystem::path(path).extension().string();
  if (!ext.empty()) ext = ext.substr(1);
  if (ext.empty() || ext == "dot" || ext == "gv") {
    if (!WriteFile(path, dot)) std::fprintf(stderr, "braid: cannot write %s\n", path.c_str());
    return;
  }
  Status s = RenderDot(dot, ext, path);
  if (!s.ok()) {
    std::string fallback = path + ".dot";
    WriteFile(fallback, dot);
    std::fprintf(stderr, "braid: %s; wrote the dot text to %s\n", s.message().c_str(),
                 fallback.c_str());
  }
}

// At most `max` bytes of `s`, cut at a UTF-8 boundary, "..." when cut.
std::string Truncated(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

nlohmann::json NodeJson(const rt::NodeInfo& n, const std::vector<rt::VarInfo>& vars) {
  nlohmann::json j;
  j["id"] = n.id;
  j["label"] = n.label;
  j["state"] = rt::NodeStateName(n.state);
  j["wanted"] = n.wanted;
  j["goal"] = n.goal == rt::Criteria::kLatency ? "latency" : "throughput";
  j["group"] = n.group;
  j["priority"] = n.priority;
  j["engine"] = n.engine;
  j["prompt_tokens"] = n.prompt_tokens;
  j["cached_tokens"] = n.cached_tokens;
  j["host_tokens"] = n.host_tokens;
  j["generated_tokens"] = n.generated_tokens;
  j["queued_ms"] = n.queued_ms;
  j["run_ms"] = n.run_ms;
  // The run's clock (ms since it started); null until then.
  j["start_ms"] = n.start_ms >= 0 ? nlohmann::json(n.start_ms) : nlohmann::json();
  j["end_ms"] = n.end_ms >= 0 ? nlohmann::json(n.end_ms) : nlohmann::json();
  j["first_token_ms"] = n.first_token_ms >= 0 ? nlohmann::json(n.first_token_ms) : nlohmann::json();
  j["decode_tokens_per_s"] = n.decode_tokens_per_s;
  if (n.deadline_ms) {
    j["deadline_ms"] = *n.deadline_ms;
    j["slack_ms"] = n.slack_ms;
    j["deadline_met"] = n.deadline_met ? nlohmann::json(*n.deadline_met) : nlohmann::json();
  }
  // A running program adds variables while it is read: one newer than the
  // `vars` snapshot is listed by id alone.
  auto find = [&](rt::VarId v) -> const rt::VarInfo* {
    return v >= 1 && static_cast<size_t>(v) <= vars.size() ? &vars[v - 1] : nullptr;
  };
  auto var_ids = [&](const std::vector<rt::VarId>& ids) {
    nlohmann::json a = nlohmann::json::array();
    for (rt::VarId v : ids) {
      const rt::VarInfo* var = find(v);
      if (var)
        a.push_back({{"var", v}, {"name", var->name}, {"producer", var->producer}});
      else
        a.push_back({{"var", v}});
    }
    return a;
  };
  j["inputs"] = var_ids(n.inputs);
  j["read_before"] = var_ids(n.read_before);  // dashed edges: read by the program, then this call
  nlohmann::json outputs = nlohmann::json::object();
  for (rt::VarId v : n.outputs) {
    const rt::VarInfo* var = find(v);
    if (var && var->state == rt::VarState::kReady) outputs[var->name] = Truncated(var->value, 500);
  }
  j["outputs"] = outputs;
  if (!n.error.empty()) j["error"] = n.error;
  if (!n.warning.empty()) j["warning"] = n.warning;
  return j;
}

// {output: {choice: log-probability}} for the node's select outputs (empty
// when it has none).
nlohmann::json ScoresJson(const rt::NodeInfo& n, const std::map<rt::VarId, rt::VarInfo>& vars) {
  nlohmann::json j = nlohmann::json::object();
  for (rt::VarId v : n.outputs) {
    auto it = vars.find(v);
    if (it == vars.end() || it->second.scores.empty()) continue;
    nlohmann::json s = nlohmann::json::object();
    for (const auto& [choice, lp] : it->second.scores) s[choice] = lp;
    j[it->second.name] = std::move(s);
  }
  return j;
}

nlohmann::json NodesJson(const rt::Run& run) {
  nlohmann::json out = nlohmann::json::array();
  // Nodes first: the variables they name exist by the time Vars() is read.
  const std::vector<rt::NodeInfo> nodes = run.Nodes();
  const std::vector<rt::VarInfo> var_list = run.Vars();
  std::map<rt::VarId, rt::VarInfo> vars;
  for (const rt::VarInfo& v : var_list) vars.emplace(v.id, v);
  for (const auto& n : nodes) {
    nlohmann::json j = NodeJson(n, var_list);
    if (nlohmann::json s = ScoresJson(n, vars); !s.empty()) j["scores"] = std::move(s);
    out.push_back(std::move(j));
  }
  return out;
}

Result<std::string> GraphSvg(const rt::Run& run, const DotLimits& limits,
                             const std::function<bool()>& cancelled) {
  return RunDot(run.ToDot(), "svg", limits, cancelled);
}

}  // namespace braid::report
