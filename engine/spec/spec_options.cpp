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
    case Kind::kDraft:
      return "draft";
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
  std::string kind = parts[0];
  if (const size_t eq = kind.find('='); eq != std::string::npos && kind.starts_with("draft")) {
    const std::string what = kind.substr(eq + 1);
    kind.resize(eq);
    if (what.empty())
      return Status::InvalidArgument("--spec draft=: the model or layer count is empty");
    char* end = nullptr;
    const long v = std::strtol(what.c_str(), &end, 10);
    if (*end == 0) {
      if (v < 1 || v > 1024)
        return Status::InvalidArgument(
            "--spec draft=L: L must be a layer count in [1, 1024], got '" + what + "'");
      o.draft_layers = static_cast<int>(v);
    } else {
      o.draft_model = what;
    }
  }
  if (kind == "off")
    o.kind = SpecOptions::Kind::kOff;
  else if (kind == "ngram")
    o.kind = SpecOptions::Kind::kNgram;
  else if (kind == "suffix")
    o.kind = SpecOptions::Kind::kSuffix;
  else if (kind == "draft")
    o.kind = SpecOptions::Kind::kDraft;
  else
    return Status::InvalidArgument(
        "--spec: expected off, ngram, suffix, draft, draft=LAYERS or draft=MODEL (then "
        "optionally :N and :fixed), got '" +
        text + "'");
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
