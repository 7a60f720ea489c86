// A tiny command-line option reader for the braid subcommands: options are
// `-x VALUE`, `--name VALUE` or flags; errors name the option.
//
// Numbers are read whole (no trailing characters), with overflow checked and
// a closed range that every numeric option must state, so that a value never
// wraps (4294967296 read into an int) and never turns a limit off by accident
// (a negative or NaN time limit). The first problem is kept for Error():
// "option -n: 4294967296 is out of range [1, 1048576]".
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace braid::cli {

class Args {
 public:
  explicit Args(const std::vector<std::string>& args) : args_(args), used_(args.size(), false) {}

  bool Flag(std::initializer_list<const char*> names) {
    for (size_t i = 0; i < args_.size(); ++i)
      for (const char* n : names)
        if (!used_[i] && args_[i] == n) {
          used_[i] = true;
          return true;
        }
    return false;
  }
  // Every value given for the option (repeatable options like --stop).
  std::vector<std::string> All(std::initializer_list<const char*> names) {
    std::vector<std::string> out;
    for (auto& [name, value] : Given(names)) out.push_back(std::move(value));
    return out;
  }
  std::string Str(std::initializer_list<const char*> names, const std::string& def) {
    auto v = All(names);
    return v.empty() ? def : v.back();
  }
  // Whether the option was given at all (even with an empty value); call
  // before Str, which consumes it.
  bool Has(std::initializer_list<const char*> names) const {
    for (size_t i = 0; i < args_.size(); ++i)
      for (const char* n : names)
        if (!used_[i] && args_[i] == n) return true;
    return false;
  }
  // A decimal integer in [lo, hi]; `def` when the option is absent.
  long long Int(std::initializer_list<const char*> names, long long def, long long lo,
                long long hi) {
    auto v = Given(names);
    if (v.empty()) return def;
    const auto& [name, text] = v.back();
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end == text.c_str() || *end) {
      Fail("option " + name + ": '" + text + "' is not an integer");
      return def;
    }
    if (errno == ERANGE || x < lo || x > hi) {
      Fail("option " + name + ": " + text + " is out of range [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
      return def;
    }
    return x;
  }
  // An unsigned 64-bit integer (all of [0, 2^64 - 1]); a sign is refused,
  // since strtoull would turn "-1" into 2^64 - 1.
  uint64_t U64(std::initializer_list<const char*> names, uint64_t def) {
    auto v = Given(names);
    if (v.empty()) return def;
    const auto& [name, text] = v.back();
    errno = 0;
    char* end = nullptr;
    const unsigned long long x = std::strtoull(text.c_str(), &end, 10);
    const bool digits = !text.empty() && text[0] >= '0' && text[0] <= '9';
    if (!digits || *end) {
      Fail("option " + name + ": '" + text + "' is not an unsigned integer");
      return def;
    }
    if (errno == ERANGE) {
      Fail("option " + name + ": " + text + " is out of range [0, 18446744073709551615]");
      return def;
    }
    return x;
  }
  // A finite decimal number in [lo, hi]; NaN and infinities are refused.
  double Num(std::initializer_list<const char*> names, double def, double lo, double hi) {
    auto v = Given(names);
    if (v.empty()) return def;
    const auto& [name, text] = v.back();
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (text.empty() || end == text.c_str() || *end) {
      Fail("option " + name + ": '" + text + "' is not a number");
      return def;
    }
    if (!std::isfinite(x)) {
      Fail("option " + name + ": " + text + " is not a finite number");
      return def;
    }
    if (x < lo || x > hi) {
      Fail("option " + name + ": " + text + " is out of range [" + Format(lo) + ", " + Format(hi) +
           "]");
      return def;
    }
    return x;
  }
  // The arguments no option has taken, in order (positional arguments), now
  // taken; options that start with '-' are left for Error() to report.
  std::vector<std::string> Positional() {
    std::vector<std::string> out;
    for (size_t i = 0; i < args_.size(); ++i)
      if (!used_[i] && (args_[i].empty() || args_[i][0] != '-')) {
        used_[i] = true;
        out.push_back(args_[i]);
      }
    return out;
  }
  // Records a bad value (the first one recorded is reported by Error()).
  void Fail(const std::string& message) {
    if (error_.empty()) error_ = message;
  }
  // The first problem: a bad value or an option nobody asked for.
  std::string Error() const {
    if (!error_.empty()) return error_;
    for (size_t i = 0; i < args_.size(); ++i)
      if (!used_[i]) return "unknown option '" + args_[i] + "'";
    return "";
  }

 private:
  // (name as given, value) for each occurrence, marking them used.
  std::vector<std::pair<std::string, std::string>> Given(std::initializer_list<const char*> names) {
    std::vector<std::pair<std::string, std::string>> out;
    for (size_t i = 0; i < args_.size(); ++i)
      for (const char* n : names)
        if (!used_[i] && args_[i] == n) {
          used_[i] = true;
          if (i + 1 >= args_.size()) {
            Fail(std::string("option ") + n + " needs a value");
          } else {
            used_[i + 1] = true;
            out.emplace_back(n, args_[++i]);
          }
          break;
        }
    return out;
  }
  static std::string Format(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
  }
  std::vector<std::string> args_;
  std::vector<bool> used_;
  std::string error_;
};

}  // namespace braid::cli
