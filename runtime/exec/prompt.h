// The prompt of one output of a call node: the template rendered with the
// node's arguments and the outputs generated before it, through the chat
// template for chat-style functions, and tokenized.
//
// Only the template's literal text may hold special tokens; inputs and
// generated outputs are plain text, so that a document cannot forge a chat
// turn. Pure functions of the DAG (which the caller guards).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "graph/dag.h"

namespace braid::rt {

struct CallPrompt {
  std::vector<PromptPiece> pieces;  // the text of `tokens`
  std::vector<int32_t> tokens;
};

// The prompt of output `output` of call `n`, given `values` (the outputs
// generated so far). OutOfRange when the rendered text passes `max_bytes`
// (RunOptions::max_value_bytes); InvalidArgument when it has no token.
Result<CallPrompt> RenderCallPrompt(const Model& model, const Dag& dag, const DagNode& n,
                                    int output, const std::map<std::string, std::string>& values,
                                    size_t max_bytes);

// "path#index#function#hash": a call's resume key in the run store, the hash
// FNV-1a 64 over its inputs' names and values (which must be ready).
std::string CallKeyString(const Dag& dag, const DagNode& n);

}  // namespace braid::rt
