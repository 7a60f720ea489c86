#include <cstdlib>
#include <vector>

#include "engine/spec.h"

namespace braid {

const char* SpecOptions::name() const {
  switch (kind) {
    case Kind::kNgram:
      return "ngram";
    case Kind::kSuffix:
      return "suffix";
    default:
      return "off";
  }
}

Result<SpecOptions> ParseSpecOptions(const std::string& text) {
  SpecOptions o;
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t colon = text.find(':', at);
    parts.push_back(text.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  const std::string& kind = parts[0];
  if (kind == "off")
    o.kind = SpecOptions::Kind::kOff;
  else if (kind == "ngram")
    o.kind = SpecOptions::Kind::kNgram;
  else if (kind == "suffix")
    o.kind = SpecOptions::Kind::kSuffix;
  else
    return Status::InvalidArgument(
        "--spec: expected off, ngram or suffix (then optionally :N and :fixed), got '" + text +
        "'");
  bool have_n = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p == "fixed" && !o.adaptive) return Status::InvalidArgument("--spec: ':fixed' given twice");
    if (p == "fixed") {
      o.adaptive = false;
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(p.c_str(), &end, 10);
    if (have_n || p.empty() || *end || v < 1 || v > 32)
      return Status::InvalidArgument(
          "--spec " + kind + ":N: N must be an integer in [1, 32] (given once), got '" + p + "'");
    o.max_tokens = static_cast<int>(v);
    have_n = true;
  }
  return o;
}

}  // namespace braid
