#include <cstdlib>

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
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  if (kind == "off")
    o.kind = SpecOptions::Kind::kOff;
  else if (kind == "ngram")
    o.kind = SpecOptions::Kind::kNgram;
  else if (kind == "suffix")
    o.kind = SpecOptions::Kind::kSuffix;
  else
    return Status::InvalidArgument("--spec: expected off, ngram or suffix (optionally :N), got '" +
                                   text + "'");
  if (colon != std::string::npos) {
    const std::string n = text.substr(colon + 1);
    char* end = nullptr;
    const long v = std::strtol(n.c_str(), &end, 10);
    if (n.empty() || *end || v < 1 || v > 32)
      return Status::InvalidArgument("--spec " + kind +
                                     ":N: N must be an integer in [1, 32], got '" + n + "'");
    o.max_tokens = static_cast<int>(v);
  }
  return o;
}

}  // namespace braid
