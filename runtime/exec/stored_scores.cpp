#include "exec/stored_scores.h"

#include <limits>
#include <nlohmann/json.hpp>

namespace braid::rt {

std::string EncodeScores(const std::map<std::string, ChoiceScores>& scores) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, choices] : scores) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [choice, lp] : choices) list.push_back({choice, lp});
    j[name] = std::move(list);
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::map<std::string, ChoiceScores> DecodeScores(const std::string& text) {
  std::map<std::string, ChoiceScores> out;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return {};
  for (const auto& [name, list] : j.items()) {
    if (!list.is_array()) return {};
    ChoiceScores& choices = out[name];
    for (const auto& pair : list) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() ||
          !(pair[1].is_number() || pair[1].is_null()))
        return {};
      const double lp =
          pair[1].is_null() ? -std::numeric_limits<double>::infinity() : pair[1].get<double>();
      choices.emplace_back(pair[0].get<std::string>(), lp);
    }
  }
  return out;
}

}  // namespace braid::rt
