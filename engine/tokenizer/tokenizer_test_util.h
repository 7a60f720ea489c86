// Helpers shared by the tokenizer tests: fixture paths and JSON-lines reading.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace braid::test {

inline std::string FixturePath(const std::string& rel) {
  return std::string(BRAID_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + rel;
}

// Every line of a JSON-lines file, parsed.
inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline std::vector<std::string> ReadCorpus() {
  std::vector<std::string> out;
  for (const auto& j : ReadJsonLines(FixturePath("corpus.jsonl")))
    out.push_back(j.get<std::string>());
  return out;
}

}  // namespace braid::test
