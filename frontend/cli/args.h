// A tiny command-line option reader for the braid subcommands: options are
// `-x VALUE`, `--name VALUE` or flags; errors name the option.
#pragma once

#include <cstdlib>
#include <string>
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
    for (size_t i = 0; i < args_.size(); ++i)
      for (const char* n : names)
        if (!used_[i] && args_[i] == n) {
          used_[i] = true;
          if (i + 1 >= args_.size()) {
            error_ = std::string("option ") + n + " needs a value";
          } else {
            used_[i + 1] = true;
            out.push_back(args_[++i]);
          }
          break;
        }
    return out;
  }
  std::string Str(std::initializer_list<const char*> names, const std::string& def) {
    auto v = All(names);
    return v.empty() ? def : v.back();
  }
  long Int(std::initializer_list<const char*> names, long def) {
    auto v = All(names);
    if (v.empty()) return def;
    char* end = nullptr;
    long x = std::strtol(v.back().c_str(), &end, 10);
    if (end == v.back().c_str() || *end) error_ = "option " + Name(names) + ": '" + v.back() + "' is not an integer";
    return x;
  }
  double Num(std::initializer_list<const char*> names, double def) {
    auto v = All(names);
    if (v.empty()) return def;
    char* end = nullptr;
    double x = std::strtod(v.back().c_str(), &end);
    if (end == v.back().c_str() || *end) error_ = "option " + Name(names) + ": '" + v.back() + "' is not a number";
    return x;
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
  static std::string Name(std::initializer_list<const char*> names) { return *names.begin(); }
  std::vector<std::string> args_;
  std::vector<bool> used_;
  std::string error_;
};

}  // namespace braid::cli
