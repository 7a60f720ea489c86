// A run as JSON and as a picture, shared by braid run --json/--graph and the
// server's run routes.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/status.h"
#include "report/graphviz.h"
#include "runtime/runtime.h"

namespace braid::report {

// At most `max` bytes of `s`, cut at a UTF-8 boundary, "..." when cut.
std::string Truncated(const std::string& s, size_t max);

// One node: state, goal, engine, tokens, times on the run's clock, deadline,
// inputs and read-before edges {var, name, producer}, outputs (500 bytes
// each at most), error.
nlohmann::json NodeJson(const rt::NodeInfo& n, const std::vector<rt::VarInfo>& vars);
// {output: {choice: log-probability}} for the node's select outputs (empty
// when it has none).
nlohmann::json ScoresJson(const rt::NodeInfo& n, const std::map<rt::VarId, rt::VarInfo>& vars);
// Every node of the run, with their scores.
nlohmann::json NodesJson(const rt::Run& run);

// Renders dot text with Graphviz into `path` (`dot -T<format>`, without
// RunDot's limits: for the command line). Errors: NotFound when 'dot' is
// not installed; IoError when it fails or `path` cannot be written.
Status RenderDot(const std::string& dot, const std::string& format, const std::string& path);
// The run's DAG into `path`: .dot/.gv (or no extension) as text, anything
// else through Graphviz; on failure the dot text goes to PATH.dot and the
// reason to stderr.
void WriteGraph(const rt::Run& run, const std::string& path);
// The run's DAG as SVG text, from dot under `limits` (RunDot, which says
// what `cancelled` does and the errors).
Result<std::string> GraphSvg(const rt::Run& run, const DotLimits& limits,
                             const std::function<bool()>& cancelled = {});

}  // namespace braid::report
