// API keys (the key file, the constant-time match) and the gate a request
// passes before routing: CORS preflight and Bearer authentication.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "http/request_parse.h"
#include "http/server.h"

namespace braid::http {

namespace {

constexpr size_t kMinKeyLength = 8;

bool NameCharOk(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == '@';
}

bool KeyCharOk(char c) { return c > ' ' && c < 0x7f; }

// Equal iff same length and bytes; the loop always runs over all of
// `expected` and never branches on the data.
bool ConstantTimeEquals(std::string_view expected, std::string_view presented) {
  unsigned char diff = expected.size() == presented.size() ? 0 : 1;
  const size_t n = presented.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    // Out of range reads of `presented` wrap around (its length is already
    // in `diff`), so the work per byte is the same whatever was presented.
    unsigned char p = n == 0 ? 0 : static_cast<unsigned char>(presented[i % n]);
    diff |= static_cast<unsigned char>(static_cast<unsigned char>(expected[i]) ^ p);
  }
  return diff == 0;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

Result<ApiKeyFile> ReadApiKeys(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(path + ": cannot read the API key file");
  ApiKeyFile file;
  std::map<std::string, bool> roles;  // client name -> admin, from its first line
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    std::string_view rest = Trim(line);
    if (rest.empty() || rest.front() == '#') continue;
    std::vector<std::string_view> fields;
    while (!rest.empty()) {
      size_t end = rest.find_first_of(" \t");
      fields.push_back(rest.substr(0, end));
      rest = end == std::string_view::npos ? std::string_view() : Trim(rest.substr(end));
    }
    // Options follow NAME KEY (a one-field line is a bare key and has none):
    // weight=W and role=admin|user, each at most once, in any order.
    std::optional<double> weight;
    std::optional<bool> admin;
    while (fields.size() > 2) {
      const std::string_view option = fields.back();
      constexpr std::string_view kWeight = "weight=";
      constexpr std::string_view kRole = "role=";
      if (option.substr(0, kWeight.size()) == kWeight && !weight) {
        const std::string value(option.substr(kWeight.size()));
        char* end = nullptr;
        const double w = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || !(w > 0) || !std::isfinite(w) ||
            w > 1e6) {
          return Status::InvalidArgument(where + "weight must be a number in (0, 1e6], got \"" +
                                         value + "\"");
        }
        weight = w;
      } else if (option.substr(0, kRole.size()) == kRole && !admin) {
        const std::string_view value = option.substr(kRole.size());
        if (value != "admin" && value != "user") {
          return Status::InvalidArgument(where + "role must be admin or user, got \"" +
                                         std::string(value) + "\"");
        }
        admin = value == "admin";
      } else {
        return Status::InvalidArgument(
            where + "expected \"NAME KEY [weight=W] [role=admin|user]\" or \"KEY\", found \"" +
            std::string(option) + "\" after the key");
      }
      fields.pop_back();
    }
    std::string name = fields.size() == 2 ? std::string(fields[0]) : "key" + std::to_string(number);
    std::string_view key = fields.back();
    if (!std::all_of(name.begin(), name.end(), NameCharOk)) {
      return Status::InvalidArgument(where + "name \"" + name +
                                     "\" has characters other than letters, digits and _-.@");
    }
    if (key.size() < kMinKeyLength) {
      return Status::InvalidArgument(where + "key shorter than " + std::to_string(kMinKeyLength) +
                                     " characters");
    }
    if (!std::all_of(key.begin(), key.end(), KeyCharOk)) {
      return Status::InvalidArgument(where + "key has characters other than printable ASCII");
    }
    if (!file.keys.emplace(std::string(key), name).second) {
      return Status::InvalidArgument(where + "duplicate key (also given earlier in the file)");
    }
    // A client is an admin on all its keys or on none: one of its keys
    // cannot see more than another.
    auto [role, fresh_role] = roles.emplace(name, admin.value_or(false));
    if (!fresh_role && role->second != admin.value_or(false)) {
      return Status::InvalidArgument(where + "client \"" + name +
                                     "\" was given another role on an earlier line");
    }
    if (role->second) file.admins.insert(name);
    if (weight) {
      auto [it, fresh] = file.weights.emplace(name, *weight);
      if (!fresh && it->second != *weight) {
        return Status::InvalidArgument(where + "client \"" + name +
                                       "\" was given another weight earlier in the file");
      }
    }
  }
  if (in.bad()) return Status::IoError(path + ": read error");
  if (file.keys.empty()) return Status::InvalidArgument(path + ": no API key in the file");
  return file;
}

std::optional<std::string> MatchApiKey(const std::map<std::string, std::string>& keys,
                                       std::string_view presented) {
  const std::string* found = nullptr;
  for (const auto& [key, name] : keys) {
    // No break: the number of comparisons must not depend on which matched.
    if (ConstantTimeEquals(key, presented)) found = &name;
  }
  if (!found) return std::nullopt;
  return *found;
}

void AddCorsHeaders(const ServerOptions& options, Response* response) {
  if (options.cors_origin.empty()) return;
  response->headers.emplace_back("Access-Control-Allow-Origin", options.cors_origin);
  // A fixed origin other than "*" varies with nothing, but caches in
  // between must not hand a response to another origin's page as if checked.
  if (options.cors_origin != "*") response->headers.emplace_back("Vary", "Origin");
}

std::optional<Response> Admit(const ServerOptions& options, Request* request) {
  if (!options.cors_origin.empty() && request->method == "OPTIONS") {
    Response res;
    res.status = 204;
    res.content_type.clear();
    res.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS");
    auto asked = request->headers.find("access-control-request-headers");
    res.headers.emplace_back("Access-Control-Allow-Headers",
                             asked != request->headers.end() && !asked->second.empty()
                                 ? asked->second
                                 : std::string("Authorization, Content-Type"));
    res.headers.emplace_back("Access-Control-Max-Age", "600");
    return res;
  }
  if (options.api_keys.empty()) return std::nullopt;
  if (std::find(options.public_paths.begin(), options.public_paths.end(), request->path) !=
      options.public_paths.end()) {
    return std::nullopt;
  }
  auto header = request->headers.find("authorization");
  std::string_view presented;
  bool bearer = false;
  if (header != request->headers.end()) {
    std::string_view value = Trim(header->second);
    // The scheme is case-insensitive (RFC 9110 11.1).
    constexpr std::string_view kScheme = "bearer ";
    if (value.size() > kScheme.size()) {
      bearer = true;
      for (size_t i = 0; i < kScheme.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(value[i])) != kScheme[i]) bearer = false;
      }
      presented = Trim(value.substr(kScheme.size()));
    }
  }
  std::optional<std::string> client;
  if (bearer) client = MatchApiKey(options.api_keys, presented);
  if (!client) {
    Response res = JsonError(
        401, bearer ? "invalid API key" : "missing API key: send \"Authorization: Bearer KEY\"", "",
        "", "invalid_api_key");
    res.headers.emplace_back("WWW-Authenticate", "Bearer");
    return res;
  }
  request->admin = options.admin_clients.count(*client) > 0;
  request->client = std::move(*client);
  return std::nullopt;
}

}  // namespace braid::http
