// Request bodies as JSON, parsed defensively: a body is outside input, so
// parsing never throws and nesting is bounded (a body of a million '['
// would otherwise cost a deep tree, and recursion when it is walked).
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/status.h"

namespace braid::http {

// Parses `body` as one JSON value. Errors (InvalidArgument): a syntax error
// or invalid UTF-8, with the byte offset where the parser stopped; arrays
// and objects nested deeper than `max_depth` levels ("[[1]]" is 2 levels),
// naming the limit. Any thread.
Result<nlohmann::json> ParseJsonBody(std::string_view body, int max_depth = 64);

// A request body that must be one JSON object, as every route taking JSON
// reads it: ParseJsonBody's errors, or InvalidArgument "the body must be a
// JSON object". `empty_is_object`: an empty body reads as {} (routes whose
// fields are all optional).
Result<nlohmann::json> ParseJsonObject(std::string_view body, int max_depth,
                                       bool empty_is_object = false);

}  // namespace braid::http
