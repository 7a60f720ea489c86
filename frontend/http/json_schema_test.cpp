// JSON Schema -> regex: each supported keyword against JSON texts that must
// and must not match (through the runtime's regex engine), errors naming
// unsupported keywords with their paths, and the size bound.
#include "http/json_schema.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "runtime/constraint.h"

namespace braid::http {
namespace {

rt::RegexConstraint Compiled(const std::string& schema) {
  auto re = JsonSchemaRegex(schema);
  REQUIRE_MESSAGE(re.ok(), re.status().message());
  auto c = rt::RegexConstraint::Compile(*re);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  return std::move(c).value();
}

// Every `yes` text matches (and is valid JSON); no `no` text matches.
void Check(const std::string& schema, std::vector<std::string> yes, std::vector<std::string> no) {
  CAPTURE(schema);
  const rt::RegexConstraint c = Compiled(schema);
  for (const std::string& y : yes) {
    CAPTURE(y);
    CHECK(c.FullMatch(y));
    CHECK(!nlohmann::json::parse(y, nullptr, false).is_discarded());
  }
  for (const std::string& n : no) {
    CAPTURE(n);
    CHECK(!c.FullMatch(n));
  }
}

std::string Error(const std::string& schema) {
  auto re = JsonSchemaRegex(schema);
  REQUIRE(!re.ok());
  CHECK(re.status().code() == StatusCode::kInvalidArgument);
  return re.status().message();
}

TEST_CASE("json schema: strings, with escapes and length bounds") {
  Check(R"({"type": "string"})",
        {R"("")", R"("abc")", R"("a\"b\\c\/d")", R"("\n\t\u00e9")", "\"caf\xc3\xa9\""},
        {"abc", R"("a"b")", "\"a\nb\"", R"("\x")", R"("\ud800")", R"("\u12")", "'a'"});
  Check(R"({"type": "string", "minLength": 2, "maxLength": 3})",
        {R"("ab")", R"("abc")", R"("a\n")", "\"\xc3\xa9\xc3\xa9\""},
        {R"("a")", R"("abcd")", R"("")"});
}

TEST_CASE("json schema: integer, number, boolean, null") {
  Check(R"({"type": "integer"})", {"0", "-12", "1234567890123456"},
        {"01", "1.5", "\"1\"", "-", "12345678901234567", "+1"});
  Check(R"({"type": "number"})", {"0", "1.5", "-0.25e10", "3E-2", "7"},
        {".5", "1.", "1e999", "--1", "1e"});
  Check(R"({"type": "boolean"})", {"true", "false"}, {"True", "1", "null"});
  Check(R"({"type": "null"})", {"null"}, {"", "nil"});
  Check(R"({"type": ["integer", "null"]})", {"5", "null"}, {"\"5\"", "true"});
}

TEST_CASE("json schema: enum and const are emitted as written") {
  Check(R"({"enum": ["red", 1, null, [1, 2]]})", {R"("red")", "1", "null", "[1,2]"},
        {R"("blue")", "2", R"("1")", "[1, 2]"});
  Check(R"({"const": {"k": "v"}})", {R"({"k":"v"})"}, {R"({"k":"w"})", "{}"});
  Check(R"({"type": "string", "enum": ["a", "b"]})", {R"("a")"}, {R"("c")"});
}

TEST_CASE("json schema: object properties in order, optional ones omissible") {
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "required": ["a", "c"], "additionalProperties": false})";
  Check(schema,
        {R"({"a":1,"c":true})", R"({"a": 1, "b": "x", "c": false})", R"({"a":1,"b":"","c":true})"},
        {R"({"c":true,"a":1})", R"({"a":1})", R"({"a":1,"c":true,"d":0})", R"({"a":  1,"c":true})",
         R"({ "a":1,"c":true})", R"({"a":1,,"c":true})", "{}"});
  // Nothing required: any in-order subset, the empty object included.
  Check(R"({"properties": {"x": {"type": "null"}, "y": {"type": "integer"}}})",
        {"{}", R"({"x":null})", R"({"y":2})", R"({"x":null, "y":2})"},
        {R"({"y":2,"x":null})", R"({,"y":2})", R"({"x":null,})"});
  // A required property after optional ones.
  Check(R"({"properties": {"x": {"type": "null"}, "y": {"type": "integer"}}, "required": ["y"]})",
        {R"({"y":1})", R"({"x":null,"y":1})"}, {"{}", R"({"x":null})"});
  // Nested objects and arrays of objects.
  Check(R"({"type": "object", "properties": {"p": {"type": "object", "properties": {
      "q": {"type": "array", "items": {"type": "object", "properties": {"r": {"type": "integer"}},
      "required": ["r"]}}}, "required": ["q"]}}, "required": ["p"]})",
        {R"({"p":{"q":[]}})", R"({"p": {"q": [{"r": 1}, {"r": 2}]}})"},
        {R"({"p":{"q":[{}]}})", R"({"p":{}})"});
}

TEST_CASE("json schema: arrays with item schemas and bounds") {
  Check(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
        {"[1]", "[1, 2]", "[1,2,3]"}, {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]", "[ 1]"});
  Check(R"({"type": "array", "items": {"type": "string"}})", {"[]", R"(["a", "b"])"},
        {R"(["a" ,"b"])"});
  Check(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
  // No item schema: any JSON value of bounded depth.
  Check(R"({"type": "array"})", {R"([{"x": [1, "y"]}, "s", -2.5, true, null])"}, {"[[[[1]]]]"});
}

TEST_CASE("json schema: anyOf, $ref into $defs, annotations ignored") {
  Check(R"({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "null"}], "title": "T"})",
        {R"("ab")", "null"}, {R"("abc")", "0"});
  Check(R"({"$defs": {"Pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}},
      "required": ["kind"], "description": "a pet"}},
      "type": "object", "properties": {"pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}}},
      "required": ["pets"], "$schema": "https://json-schema.org/draft/2020-12/schema"})",
        {R"({"pets":[{"kind":"cat"}, {"kind":"dog"}]})"}, {R"({"pets":[{"kind":"cow"}]})"});
  Check(R"({"definitions": {"N": {"type": "integer"}}, "$ref": "#/definitions/N"})", {"42"},
        {"4.2"});
  Check("{}", {"1", R"({"a": [true]})", R"("s")"}, {""});
  Check("true", {"null"}, {"nul"});
}

TEST_CASE("json_object mode: any object, nesting bounded") {
  auto c = rt::RegexConstraint::Compile(JsonObjectRegex());
  REQUIRE(c.ok());
  CHECK(c->FullMatch("{}"));
  CHECK(c->FullMatch(R"({"a": {"b": [1, "x", null]}, "c": -1.5e3})"));
  CHECK(c->FullMatch(R"({"a":{"b":{"c":1}}})"));  // three levels
  CHECK(!c->FullMatch(R"({"a":{"b":{"c":{"d":1}}}})"));
  CHECK(!c->FullMatch("[1]"));
  CHECK(!c->FullMatch(R"({"a":1,})"));
  CHECK(!c->FullMatch(R"({a:1})"));
}

TEST_CASE("json schema: unsupported keywords are named with their path") {
  std::string e = Error(R"({"type": "object", "properties": {"name": {"type": "string",
      "pattern": "^[a-z]+$"}}})");
  CHECK(e.find("'pattern'") != std::string::npos);
  CHECK(e.find("/properties/name") != std::string::npos);
  e = Error(R"({"type": "array", "items": {"type": "string", "format": "date-time"}})");
  CHECK(e.find("'format' at /items") != std::string::npos);
  e = Error(R"({"type": "integer", "minimum": 0})");
  CHECK(e.find("'minimum' at /") != std::string::npos);
  e = Error(R"({"oneOf": [{"type": "integer"}]})");
  CHECK(e.find("'oneOf'") != std::string::npos);
  e = Error(R"({"properties": {"a/b": {"not": {}}}})");
  CHECK(e.find("/properties/a~1b") != std::string::npos);
  e = Error(R"({"anyOf": [{"type": "string"}, {"allOf": []}]})");
  CHECK(e.find("'allOf' at /anyOf/1") != std::string::npos);
}

TEST_CASE("json schema: malformed values, cycles and size are errors") {
  CHECK(Error("{").find("invalid JSON") != std::string::npos);
  CHECK(Error(R"({"type": "text"})").find("unknown type 'text'") != std::string::npos);
  CHECK(Error(R"({"properties": {"a": {}}, "required": ["b"]})").find("'b'") != std::string::npos);
  CHECK(Error(R"({"type": "string", "maxLength": 100000})").find("maxLength") != std::string::npos);
  CHECK(Error(R"({"type": "string", "minLength": 3, "maxLength": 2})").find("below") !=
        std::string::npos);
  CHECK(Error(R"({"type": "array", "minItems": -1})").find("minItems") != std::string::npos);
  CHECK(Error(R"({"enum": []})").find("enum") != std::string::npos);
  CHECK(Error(R"({"$defs": {"T": {"type": "array", "items": {"$ref": "#/$defs/T"}}},
      "$ref": "#/$defs/T"})")
            .find("recursive") != std::string::npos);
  CHECK(Error(R"({"$ref": "https://example.com/s.json"})").find("$ref") != std::string::npos);
  CHECK(Error(R"({"enum": [1], "type": "integer", "minItems": 1})").find("together") !=
        std::string::npos);
  // Many optional properties: the regex grows with their square.
  std::string props;
  for (int i = 0; i < 40; ++i)
    props += (i ? "," : "") + std::string("\"p") + std::to_string(i) +
             "\": {\"type\": \"string\", \"maxLength\": 32}";
  CHECK(Error("{\"properties\": {" + props + "}}").find("too large") != std::string::npos);
}

TEST_CASE("json schema: a compiled regex of every accepted schema stays within bounds") {
  // Near the size bound, the automaton must still compile.
  for (const char* s :
       {R"({"type": "string", "maxLength": 256})",
        R"({"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 16})",
        R"({"type": "array", "items": {}, "maxItems": 3})",
        R"({"type": "array", "items": {"type": "array", "items": {"type": "array"}}})",
        R"({"type": "array", "items": {"type": "number"}, "minItems": 256, "maxItems": 256})",
        R"({"type": "array", "items": {"type": "string", "maxLength": 100}, "maxItems": 3})",
        R"({"type": ["object", "array", "string", "integer", "number", "boolean", "null"]})",
        R"({"type": "object", "properties": {"x": {"type": "array"}, "y": {"type": "array"}}})"}) {
    CAPTURE(s);
    auto re = JsonSchemaRegex(s);
    if (!re.ok()) {
      CHECK(re.status().message().find("too large") != std::string::npos);
      continue;
    }
    auto c = rt::RegexConstraint::Compile(*re);
    CHECK_MESSAGE(c.ok(), c.status().message());
  }
}

}  // namespace
}  // namespace braid::http
