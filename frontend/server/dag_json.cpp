#include "server/dag_json.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "http/json_body.h"

namespace braid::server {
namespace {

using nlohmann::json;

Status Bad(const std::string& where, const std::string& what) {
  return Status::InvalidArgument(where + ": " + what);
}

const char* TypeName(const json& j) { return j.type_name(); }

}  // namespace

namespace {

Result<std::string> String(const json& obj, const char* key, const std::string& where,
                           bool required) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) return Bad(where, std::string("'") + key + "' is missing");
    return std::string();
  }
  if (!it->is_string())
    return Bad(where + "." + key, std::string("must be a string, not ") + TypeName(*it));
  return it->get<std::string>();
}

Result<DagValue> Value(const json& v, const std::string& where, size_t* text_bytes) {
  DagValue out;
  if (v.is_string()) {
    out.text = v.get<std::string>();
    *text_bytes += out.text.size();
    return out;
  }
  if (v.is_object() && v.size() == 1 && v.contains("ref") && v["ref"].is_string()) {
    out.ref = v["ref"].get<std::string>();
    if (out.ref.empty()) return Bad(where, "the ref is empty");
    return out;
  }
  return Bad(where,
             std::string("must be literal text (a string) or {\"ref\": \"CALL.OUTPUT\"}, not ") +
                 TypeName(v));
}

Result<rt::FunctionSpec> Function(const std::string& name, const json& f, const std::string& where,
                                  size_t* text_bytes) {
  if (!f.is_object()) return Bad(where, std::string("must be an object, not ") + TypeName(f));
  rt::FunctionSpec spec;
  spec.name = name;
  BRAID_ASSIGN_OR_RETURN(spec.prompt, String(f, "template", where, true));
  BRAID_ASSIGN_OR_RETURN(spec.system, String(f, "system", where, false));
  if (auto it = f.find("lazy"); it != f.end()) {
    if (!it->is_boolean()) return Bad(where + ".lazy", "must be true or false");
    spec.lazy = it->get<bool>();
  }
  if (auto it = f.find("messages"); it != f.end()) {
    if (!it->is_array()) return Bad(where + ".messages", "must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string w = where + ".messages[" + std::to_string(i) + "]";
      const json& m = (*it)[i];
      if (!m.is_object()) return Bad(w, "must be an object {role, content}");
      ChatMessage msg;
      BRAID_ASSIGN_OR_RETURN(msg.role, String(m, "role", w, true));
      BRAID_ASSIGN_OR_RETURN(msg.content, String(m, "content", w, true));
      *text_bytes += msg.content.size();
      spec.messages.push_back(std::move(msg));
    }
  }
  *text_bytes += spec.prompt.size() + spec.system.size();
  for (const auto& [key, _] : f.items())
    if (key != "template" && key != "system" && key != "lazy" && key != "messages")
      return Bad(where, "unknown field '" + key + "' (template, system, messages, lazy)");
  // The template's own errors, with the function's name, line and column.
  if (auto parsed = rt::SemanticFunction::Parse(spec); !parsed.ok())
    return Bad(where, parsed.status().message());
  return spec;
}

Result<rt::GetOptions> GetOptions(const json& o, const std::string& where) {
  rt::GetOptions get;
  BRAID_ASSIGN_OR_RETURN(std::string criteria, String(o, "criteria", where, false));
  if (criteria == "latency") {
    get.criteria = rt::Criteria::kLatency;
  } else if (!criteria.empty() && criteria != "throughput") {
    return Bad(where + ".criteria", "must be latency or throughput, not '" + criteria + "'");
  }
  if (auto it = o.find("deadline_ms"); it != o.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() <= 0 || it->get<double>() > 86400e3)
      return Bad(where + ".deadline_ms", "must be a number of milliseconds in (0, 86400000]");
    get.deadline_ms = it->get<double>();
  }
  return get;
}

// ParseDag's work in progress: the plan, its nodes before they are sorted
// and their index by id, and what the limits count.
struct DagBuilder {
  explicit DagBuilder(const DagLimits& l) : limits(l) {}
  const DagLimits& limits;
  DagPlan plan;
  std::vector<DagNodeSpec> nodes;
  std::map<std::string, size_t> index;  // node id -> position in `nodes`
  size_t text_bytes = 0;                // literal text, in all
  size_t edges = 0;                     // refs, in all
};

// "functions": {name: {template, ...}}, each template parsed.
Status ParseFunctions(const json& root, DagBuilder* b) {
  const json* functions = root.contains("functions") ? &root["functions"] : nullptr;
  if (!functions || !functions->is_object() || functions->empty())
    return Bad("functions", "must be a non-empty object {name: {template, ...}}");
  if (functions->size() > b->limits.max_functions)
    return Status::TooLarge("functions: " + std::to_string(functions->size()) +
                            " functions, over the limit of " +
                            std::to_string(b->limits.max_functions));
  for (const auto& [name, f] : functions->items()) {
    BRAID_ASSIGN_OR_RETURN(rt::FunctionSpec spec,
                           Function(name, f, "functions." + name, &b->text_bytes));
    b->plan.functions.emplace(name, std::move(spec));
  }
  return Status::Ok();
}

// A join's fields: "parts" (texts and refs) and "sep".
Status ParseJoin(const json& c, const std::string& where, DagBuilder* b, DagNodeSpec* n) {
  BRAID_ASSIGN_OR_RETURN(n->sep, String(c, "sep", where, false));
  auto parts = c.find("parts");
  if (parts == c.end() || !parts->is_array())
    return Bad(where + ".parts", "must be an array of texts and refs");
  for (size_t k = 0; k < parts->size(); ++k) {
    BRAID_ASSIGN_OR_RETURN(
        DagValue v,
        Value((*parts)[k], where + ".parts[" + std::to_string(k) + "]", &b->text_bytes));
    b->edges += v.ref.empty() ? 0 : 1;
    n->parts.push_back(std::move(v));
  }
  return Status::Ok();
}

// A call's fields: "function" (one of the plan's) and "inputs", which must
// be exactly the inputs its template names.
Status ParseCall(const json& c, const std::string& where, DagBuilder* b, DagNodeSpec* n) {
  BRAID_ASSIGN_OR_RETURN(n->function, String(c, "function", where, true));
  auto fn = b->plan.functions.find(n->function);
  if (fn == b->plan.functions.end())
    return Bad(where + ".function", "unknown function '" + n->function + "'");
  auto inputs = c.find("inputs");
  if (inputs != c.end() && !inputs->is_object())
    return Bad(where + ".inputs", "must be an object {input: text or {\"ref\": ...}}");
  if (inputs != c.end())
    for (const auto& [name, v] : inputs->items()) {
      BRAID_ASSIGN_OR_RETURN(DagValue dv, Value(v, where + ".inputs." + name, &b->text_bytes));
      b->edges += dv.ref.empty() ? 0 : 1;
      n->inputs.emplace(name, std::move(dv));
    }
  auto parsed = rt::SemanticFunction::Parse(fn->second);
  const auto& want = (*parsed)->inputs();
  for (const std::string& in : want)
    if (!n->inputs.count(in))
      return Bad(where + ".inputs",
                 "input '" + in + "' of function '" + n->function + "' is not given");
  for (const auto& [name, _] : n->inputs)
    if (std::find(want.begin(), want.end(), name) == want.end())
      return Bad(where + ".inputs." + name,
                 "function '" + n->function + "' has no input '" + name + "'");
  return Status::Ok();
}

// Adds a parsed node under its id (unique, without '.').
Status AddNode(DagNodeSpec n, const std::string& where, DagBuilder* b) {
  if (n.id.empty()) return Bad(where + ".id", "is empty");
  if (n.id.find('.') != std::string::npos)
    return Bad(where + ".id", "'" + n.id + "' contains '.', which refs use to name outputs");
  if (!b->index.emplace(n.id, b->nodes.size()).second)
    return Bad(where + ".id", "'" + n.id + "' is used twice");
  b->nodes.push_back(std::move(n));
  if (b->nodes.size() > b->limits.max_nodes)
    return Status::TooLarge("the DAG has more than " + std::to_string(b->limits.max_nodes) +
                            " calls and joins");
  return Status::Ok();
}

// "calls" and "joins", unordered for now, within the limits.
Status ParseNodes(const json& root, DagBuilder* b) {
  for (const char* section : {"calls", "joins"}) {
    auto it = root.find(section);
    if (it == root.end()) continue;
    if (!it->is_array()) return Bad(section, "must be an array");
    const bool join = std::string(section) == "joins";
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = std::string(section) + "[" + std::to_string(i) + "]";
      const json& c = (*it)[i];
      if (!c.is_object()) return Bad(where, std::string("must be an object, not ") + TypeName(c));
      DagNodeSpec n;
      n.join = join;
      BRAID_ASSIGN_OR_RETURN(n.id, String(c, "id", where, true));
      BRAID_RETURN_IF_ERROR(join ? ParseJoin(c, where, b, &n) : ParseCall(c, where, b, &n));
      if (b->edges > b->limits.max_edges)
        return Status::TooLarge("the DAG has more than " + std::to_string(b->limits.max_edges) +
                                " refs");
      BRAID_RETURN_IF_ERROR(AddNode(std::move(n), where, b));
    }
  }
  if (b->text_bytes > b->limits.max_text_bytes)
    return Status::TooLarge("the DAG's text is " + std::to_string(b->text_bytes) +
                            " bytes, over the limit of " +
                            std::to_string(b->limits.max_text_bytes));
  return Status::Ok();
}

// A ref's node, or an error naming the place.
Result<size_t> Resolve(const DagBuilder& b, const std::string& ref, const std::string& where) {
  const size_t dot = ref.find('.');
  const std::string id = ref.substr(0, dot);
  auto it = b.index.find(id);
  if (it == b.index.end())
    return Bad(where, "unknown ref '" + ref + "': no call or join '" + id + "'");
  const DagNodeSpec& n = b.nodes[it->second];
  if (n.join) {
    if (dot != std::string::npos)
      return Bad(where, "ref '" + ref + "': join '" + id + "' has one value; name it '" + id + "'");
    return it->second;
  }
  if (dot == std::string::npos)
    return Bad(where,
               "ref '" + ref + "' names a call: name one of its outputs, '" + id + ".OUTPUT'");
  const std::string out = ref.substr(dot + 1);
  auto parsed = rt::SemanticFunction::Parse(b.plan.functions.at(n.function));
  for (const rt::OutputSpec& o : (*parsed)->outputs())
    if (o.name == out) return it->second;
  return Bad(where, "ref '" + ref + "': function '" + n.function + "' has no output '" + out + "'");
}

// The nodes into the plan in topological order (Kahn's); what is left over
// lies on or behind a cycle. Afterwards `nodes` and `index` follow the plan.
Status SortNodes(DagBuilder* b) {
  std::vector<DagNodeSpec>& nodes = b->nodes;
  std::vector<std::vector<size_t>> users(nodes.size());
  std::vector<int> pending(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const DagNodeSpec& n = nodes[i];
    const std::string where = (n.join ? "joins '" : "calls '") + n.id + "'";
    std::vector<const DagValue*> refs;
    for (const auto& [_, v] : n.inputs) refs.push_back(&v);
    for (const auto& v : n.parts) refs.push_back(&v);
    for (const DagValue* v : refs) {
      if (v->ref.empty()) continue;
      BRAID_ASSIGN_OR_RETURN(size_t from, Resolve(*b, v->ref, where));
      users[from].push_back(i);
      ++pending[i];
    }
  }
  std::vector<size_t> ready, order;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    const size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push_back(u);
  }
  if (order.size() != nodes.size()) {
    std::string stuck;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (pending[i] > 0) stuck += (stuck.empty() ? "" : ", ") + nodes[i].id;
    return Status::InvalidArgument("the DAG has a cycle through: " + stuck);
  }
  for (size_t i : order) b->plan.nodes.push_back(std::move(nodes[i]));
  b->index.clear();
  for (size_t i = 0; i < b->plan.nodes.size(); ++i) b->index[b->plan.nodes[i].id] = i;
  nodes = b->plan.nodes;  // Resolve reads `nodes`
  return Status::Ok();
}

// "outputs": refs, or {ref, criteria?, deadline_ms?}.
Status ParseOutputs(const json& root, DagBuilder* b) {
  auto outputs = root.find("outputs");
  if (outputs == root.end() || !outputs->is_array() || outputs->empty())
    return Bad("outputs", "must be a non-empty array of {ref, criteria?, deadline_ms?}");
  for (size_t i = 0; i < outputs->size(); ++i) {
    const std::string where = "outputs[" + std::to_string(i) + "]";
    const json& o = (*outputs)[i];
    DagOutputSpec out;
    if (o.is_string()) {
      out.ref = o.get<std::string>();
    } else if (o.is_object()) {
      BRAID_ASSIGN_OR_RETURN(out.ref, String(o, "ref", where, true));
      BRAID_ASSIGN_OR_RETURN(out.get, GetOptions(o, where));
    } else {
      return Bad(where, "must be a ref or {ref, criteria?, deadline_ms?}");
    }
    BRAID_RETURN_IF_ERROR(Resolve(*b, out.ref, where + ".ref").status());
    b->plan.outputs.push_back(std::move(out));
  }
  return Status::Ok();
}

// The top level's "name" (a string when given) and no field unknown.
Status CheckTopLevel(const json& root) {
  if (auto name = root.find("name"); name != root.end() && !name->is_null() && !name->is_string())
    return Bad("name", std::string("must be a string, not ") + TypeName(*name));
  for (const auto& [key, _] : root.items())
    if (key != "functions" && key != "calls" && key != "joins" && key != "outputs" &&
        key != "detached" && key != "stream" && key != "name")
      return Bad(key, "unknown field (functions, calls, joins, outputs, detached, stream, name)");
  return Status::Ok();
}

}  // namespace

Result<DagPlan> ParseDag(std::string_view body, const DagLimits& limits) {
  BRAID_ASSIGN_OR_RETURN(json root, http::ParseJsonBody(body, limits.max_depth));
  if (!root.is_object()) return Status::InvalidArgument("the DAG must be a JSON object");
  DagBuilder b(limits);
  BRAID_RETURN_IF_ERROR(ParseFunctions(root, &b));
  BRAID_RETURN_IF_ERROR(ParseNodes(root, &b));
  BRAID_RETURN_IF_ERROR(SortNodes(&b));
  BRAID_RETURN_IF_ERROR(ParseOutputs(root, &b));
  BRAID_RETURN_IF_ERROR(CheckTopLevel(root));
  return std::move(b.plan);
}

Result<std::vector<std::pair<std::string, rt::VarId>>> BuildDag(const DagPlan& plan, rt::Run& run) {
  std::map<std::string, std::shared_ptr<const rt::SemanticFunction>> fns;
  for (const auto& [name, spec] : plan.functions) {
    BRAID_ASSIGN_OR_RETURN(fns[name], rt::SemanticFunction::Parse(spec));
  }
  std::map<std::string, rt::VarId> vars;  // ref -> variable
  auto arg = [&](const DagValue& v) {
    return v.ref.empty() ? rt::Arg::Text(v.text) : rt::Arg::Var(vars.at(v.ref));
  };
  int index = 0;
  for (const DagNodeSpec& n : plan.nodes) {
    if (n.join) {
      std::vector<rt::Arg> parts;
      for (const DagValue& p : n.parts) parts.push_back(arg(p));
      auto v = run.Join(parts, n.sep);
      if (!v.ok()) return Status::InvalidArgument("join '" + n.id + "': " + v.status().message());
      vars[n.id] = *v;
      continue;
    }
    std::map<std::string, rt::Arg> args;
    for (const auto& [name, v] : n.inputs) args.emplace(name, arg(v));
    // Calls are keyed by their position in the sorted plan, which the same
    // body always gives: a resumed DAG replays what finished.
    auto outs = run.Call(*fns.at(n.function), args, rt::CallKey{"dag", index++});
    if (!outs.ok())
      return Status::InvalidArgument("call '" + n.id + "': " + outs.status().message());
    for (const auto& [name, v] : *outs) vars[n.id + "." + name] = v;
  }
  std::vector<std::pair<std::string, rt::VarId>> out;
  for (const DagOutputSpec& o : plan.outputs) {
    const rt::VarId v = vars.at(o.ref);
    BRAID_RETURN_IF_ERROR(run.Want(v, o.get));
    out.emplace_back(o.ref, v);
  }
  return out;
}

}  // namespace braid::server
