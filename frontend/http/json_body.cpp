#include "http/json_body.h"

#include <exception>
#include <string>

namespace braid::http {

namespace {

// Thrown from the parser callback to stop at the first level too deep
// (rather than parse the rest of a hostile body); caught below.
struct TooDeep {};

}  // namespace

Result<nlohmann::json> ParseJsonBody(std::string_view body, int max_depth) {
  using json = nlohmann::json;
  // The callback's depth counts the containers around the event: 0 for the
  // top-level value's own start, so a start at depth d opens level d + 1.
  json::parser_callback_t limit = [max_depth](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth) {
      throw TooDeep{};
    }
    return true;
  };
  try {
    return json::parse(body.begin(), body.end(), limit, /*allow_exceptions=*/true);
  } catch (const TooDeep&) {
    return Status::InvalidArgument("JSON nested deeper than the limit of " +
                                   std::to_string(max_depth) + " levels");
  } catch (const json::parse_error& e) {
    // e.what() starts "[json.exception.parse_error.101] parse error at
    // line 1, column 5: ..."; the part after the bracket is for people.
    std::string what = e.what();
    size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    return Status::InvalidArgument("invalid JSON at byte " + std::to_string(e.byte) + ": " + what);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("invalid JSON: ") + e.what());
  }
}

Result<nlohmann::json> ParseJsonObject(std::string_view body, int max_depth, bool empty_is_object) {
  if (body.empty() && empty_is_object) return nlohmann::json::object();
  BRAID_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonBody(body, max_depth));
  if (!j.is_object()) return Status::InvalidArgument("the body must be a JSON object");
  return j;
}

}  // namespace braid::http
