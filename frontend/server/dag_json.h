// A whole DAG submitted as JSON (POST /v1/dags; docs/http-api.md): semantic
// functions with their templates, calls binding each input to literal text
// or to another call's output, joins, and the outputs wanted with their
// criteria or deadline.
//
//   {"functions": {"summarize": {"template": "...{{chunk}}...{{gen summary max_tokens=64}}"}},
//    "calls": [{"id": "s1", "function": "summarize", "inputs": {"chunk": "text"}},
//              {"id": "r", "function": "reduce", "inputs": {"all": {"ref": "j"}}}],
//    "joins": [{"id": "j", "parts": [{"ref": "s1.summary"}, "\n"], "sep": ""}],
//    "outputs": [{"ref": "r.final", "criteria": "latency", "deadline_ms": 5000}]}
//
// A ref names "CALL.OUTPUT" or a join's id. Calls and joins may be listed
// in any order; a cycle is an error naming it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"
#include "runtime/runtime.h"

namespace braid::server {

struct DagLimits {
  size_t max_functions = 1000;
  size_t max_nodes = 10000;                 // calls + joins
  size_t max_edges = 100000;                // refs in inputs and join parts
  size_t max_text_bytes = size_t{8} << 20;  // all literal text together
  int max_depth = 32;                       // JSON nesting
};

// One input or join part: literal text, or a ref.
struct DagValue {
  std::string text;
  std::string ref;  // "" = literal
};

struct DagNodeSpec {
  std::string id;
  bool join = false;
  std::string function;                    // call
  std::map<std::string, DagValue> inputs;  // call
  std::vector<DagValue> parts;             // join
  std::string sep;                         // join
};

struct DagOutputSpec {
  std::string ref;
  rt::GetOptions get;
};

struct DagPlan {
  std::map<std::string, rt::FunctionSpec> functions;
  std::vector<DagNodeSpec> nodes;  // in an order where every ref comes before its use
  std::vector<DagOutputSpec> outputs;
};

// Parses and checks `body` (syntax, types, unknown functions and refs,
// templates, cycles, limits). Errors (InvalidArgument, or TooLarge for a
// limit, naming it) name the place: "calls[2].inputs.chunk: unknown ref
// 'x.y'".
Result<DagPlan> ParseDag(std::string_view body, const DagLimits& limits);

// The plan's calls and joins added to `run` and its outputs wanted. Returns
// each output's ref and variable, in the plan's order. Errors: a call the
// run refuses (an input the template lacks, ...), naming the node.
Result<std::vector<std::pair<std::string, rt::VarId>>> BuildDag(const DagPlan& plan, rt::Run& run);

}  // namespace braid::server
