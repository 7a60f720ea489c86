// JSON Schema -> regular expression, for response_format {"type":
// "json_schema"} and {"type": "json_object"}: the regex (the syntax of
// runtime/constraint.h) matches JSON text that is valid under the schema, and
// decoding is then constrained to it.
//
// The supported subset (JSON paths below are JSON Pointers into the schema):
//   type        "object" | "array" | "string" | "integer" | "number" |
//               "boolean" | "null", or a list of these (any one of them)
//   object      "properties" (emitted in the order they are declared) and
//               "required" (names that must be in "properties"). Required
//               properties are always emitted; an optional property may be
//               omitted. "additionalProperties" is accepted with any value and
//               no extra property is ever emitted. An object without
//               "properties" is any JSON object (below).
//   array       "items" (one schema; absent: any JSON value), "minItems",
//               "maxItems" (each at most 256)
//   string      "minLength", "maxLength" (each at most 256; in characters, an
//               escape counting as one)
//   integer     -?(0|[1-9][0-9]{0,15}): at most 16 digits
//   number      an integer part as above, an optional fraction of 1..15
//               digits and an optional exponent of 1..2 digits
//   enum, const JSON values, emitted exactly as written (compact)
//   anyOf       a list of subschemas: any one of them
//   $ref        "#/$defs/NAME" or "#/definitions/NAME", expanded in place
//               (not recursively: a reference cycle is an error)
//   ignored     annotations: title, description, $schema, $id, $comment,
//               default, examples, deprecated, readOnly, writeOnly, and
//               "$defs"/"definitions" themselves
// enum, const, anyOf and $ref take no sibling keywords but "type" and
// annotations. Any other keyword (pattern, format, minimum, oneOf, allOf,
// not, patternProperties, uniqueItems, ...) is an error naming it and its
// path. Schemas nest at most 24 levels (their JSON text at most 64).
//
// Any JSON value (items without a schema, a schema of {} or true) nests at
// most kAnyJsonDepth levels of objects and arrays, an object without
// "properties" as much in all; json_object mode's object holds values that
// nest kAnyJsonDepth levels more. (Deeper generic JSON makes automata too
// large: each level about quadruples the regex.)
//
// Whitespace: none anywhere, except an optional single space after ':' and
// ','. Strings: no raw control characters; escapes \" \\ \/ \b \f \n \r \t
// and \uXXXX outside the surrogate range; non-ASCII characters as UTF-8
// (lead and continuation bytes, as the regex engine admits them).
//
// The regex's size is bounded: each piece's weight estimates the DFA states
// it adds (bounded repeats count every copy; optional properties cost about
// the square of their number), so that a returned regex compiles within the
// regex engine's bounds (10,000 DFA states); larger schemas are an
// InvalidArgument naming the bound. Thread-safe: plain functions.
#pragma once

#include <string>
#include <string_view>

#include "engine/status.h"

namespace braid::http {

inline constexpr int kAnyJsonDepth = 2;

// The regex of JSON text valid under `schema_json` (a JSON Schema as JSON
// text). Errors (InvalidArgument): malformed JSON, an unsupported keyword
// ("unsupported keyword 'pattern' at /properties/name"), a malformed value of
// a supported one, a reference cycle, a schema whose regex is too large.
Result<std::string> JsonSchemaRegex(std::string_view schema_json);

// The regex of any JSON object (response_format {"type": "json_object"}).
std::string JsonObjectRegex();

}  // namespace braid::http
