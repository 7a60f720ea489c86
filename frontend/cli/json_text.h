// Text for the JSON the braid subcommands write by hand (bench results).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace braid::cli {

// `s` as the inside of a JSON string literal (RFC 8259, section 7): quote,
// backslash and the control characters U+0000-U+001F escaped; every other
// byte, UTF-8 included, as it is.
inline std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace braid::cli
