// ParseJsonBody: values, syntax errors with their offset, the depth limit;
// ParseJsonObject: objects only, an empty body as {} where asked.
#include "http/json_body.h"

#include <doctest/doctest.h>

#include <string>

namespace braid::http {
namespace {

TEST_CASE("ParseJsonBody parses values") {
  auto j = ParseJsonBody(R"({"model": "m", "messages": [{"role": "user"}], "n": 2})");
  REQUIRE_MESSAGE(j.ok(), j.status().ToString());
  CHECK((*j)["model"] == "m");
  CHECK((*j)["messages"][0]["role"] == "user");
  CHECK((*j)["n"] == 2);
  CHECK(ParseJsonBody("3").value() == 3);
}

TEST_CASE("ParseJsonBody reports syntax errors with the byte offset") {
  auto bad = ParseJsonBody(R"({"a": tru})");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("at byte 10") != std::string::npos);
  CHECK(bad.status().message().find("json.exception") == std::string::npos);
  auto empty = ParseJsonBody("");
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.status().message().find("at byte") != std::string::npos);
  CHECK_FALSE(ParseJsonBody("{} {}").ok());     // one value only
  CHECK_FALSE(ParseJsonBody("\"\xff\"").ok());  // not UTF-8
}

TEST_CASE("ParseJsonBody enforces the nesting limit") {
  auto nested = [](int levels) {
    return std::string(static_cast<size_t>(levels), '[') +
           std::string(static_cast<size_t>(levels), ']');
  };
  CHECK(ParseJsonBody(nested(64)).ok());
  auto deep = ParseJsonBody(nested(65));
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.status().message().find("limit of 64") != std::string::npos);
  CHECK(ParseJsonBody(nested(3), 3).ok());
  CHECK_FALSE(ParseJsonBody(R"({"a": {"b": {"c": 1}}})", 2).ok());
  CHECK(ParseJsonBody(R"({"a": {"b": 1}})", 2).ok());
  // A hostile body is refused without building it: a million levels.
  CHECK_FALSE(ParseJsonBody(std::string(1000000, '[')).ok());
}

TEST_CASE("ParseJsonObject takes objects only") {
  auto obj = ParseJsonObject(R"({"name": "s", "n": 2})", 8);
  REQUIRE(obj.ok());
  CHECK((*obj)["name"] == "s");
  CHECK((*obj)["n"] == 2);
  for (const char* body : {"[1, 2]", "\"text\"", "3", "null"}) {
    auto r = ParseJsonObject(body, 8);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message() == "the body must be a JSON object");
  }
  // A syntax error and the depth limit read as ParseJsonBody says them.
  auto bad = ParseJsonObject(R"({"a": tru})", 8);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("at byte 10") != std::string::npos);
  auto deep = ParseJsonObject(R"({"a": {"b": {"c": 1}}})", 2);
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.status().message().find("limit of 2") != std::string::npos);
}

TEST_CASE("ParseJsonObject reads an empty body as {} only where asked") {
  auto strict = ParseJsonObject("", 8);
  REQUIRE_FALSE(strict.ok());
  CHECK(strict.status().message().find("at byte") != std::string::npos);
  auto lenient = ParseJsonObject("", 8, /*empty_is_object=*/true);
  REQUIRE(lenient.ok());
  CHECK(lenient->is_object());
  CHECK(lenient->empty());
  // Only an empty body: whitespace is still parsed (and is no JSON value).
  CHECK_FALSE(ParseJsonObject(" ", 8, true).ok());
}

}  // namespace
}  // namespace braid::http
