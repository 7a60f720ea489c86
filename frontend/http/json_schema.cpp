#include "http/json_schema.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "http/json_body.h"

namespace braid::http {
namespace {

// ordered_json keeps "properties" in the order they were written.
using Json = nlohmann::ordered_json;

// Bounds. A fragment's weight estimates the DFA states it contributes (one
// per literal byte, measured figures for strings and numbers, bounded
// repeats counting every copy): the regex engine allows 10,000 states.
constexpr size_t kMaxWeight = 9'000;
constexpr size_t kStringCharWeight = 16;  // a string of maxLength 256 has 3,843 states
constexpr size_t kIntegerWeight = 20;     // 18 states
constexpr size_t kNumberWeight = 45;      // ~39 states per number in an array
constexpr int kMaxStringLength = 256;
constexpr int kMaxItems = 256;
constexpr int kMaxProperties = 64;
constexpr int kMaxSchemaDepth = 24;
constexpr int kMaxJsonDepth = 64;  // nesting of the schema's JSON text (enum values included)

// A piece of regex and its weight.
struct Frag {
  std::string re;
  size_t weight = 0;
};

Frag Raw(std::string re) {
  const size_t w = re.size();
  return {std::move(re), w};
}

Frag Weighed(std::string re, size_t weight) { return {std::move(re), weight}; }

// `text` as a regex literal: punctuation escaped.
Frag Literal(std::string_view text) {
  std::string re;
  for (char c : text) {
    if (std::string_view("\\.^$|?*+()[]{}-/").find(c) != std::string_view::npos) re += '\\';
    re += c;
  }
  return Raw(std::move(re));
}

Frag Concat(std::initializer_list<const Frag*> parts) {
  Frag out;
  for (const Frag* p : parts) {
    out.re += p->re;
    out.weight += p->weight;
  }
  return out;
}

// (?:a|b|...); a single alternative stays as it is.
Frag Alternation(const std::vector<Frag>& alts) {
  if (alts.size() == 1) return alts[0];
  Frag out;
  out.re = "(?:";
  for (size_t i = 0; i < alts.size(); ++i) {
    if (i) out.re += '|';
    out.re += alts[i].re;
    out.weight += alts[i].weight;
  }
  out.re += ')';
  out.weight += 1;
  return out;
}

// body{min,max} (max -1: unbounded); the weight counts every copy.
Frag Repeat(const Frag& body, int min, int max) {
  Frag out;
  out.re = "(?:" + body.re + ")";
  if (min == 0 && max == -1) {
    out.re += "*";
  } else if (min == 1 && max == -1) {
    out.re += "+";
  } else if (min == 0 && max == 1) {
    out.re += "?";
  } else if (max == -1) {
    out.re += "{" + std::to_string(min) + ",}";
  } else if (min == max) {
    out.re += "{" + std::to_string(min) + "}";
  } else {
    out.re += "{" + std::to_string(min) + "," + std::to_string(max) + "}";
  }
  const size_t copies = static_cast<size_t>(std::max({1, min, max}));
  out.weight = body.weight * copies + 1;
  return out;
}

const Frag& Colon() {
  static const Frag f = Raw(": ?");
  return f;
}
const Frag& Comma() {
  static const Frag f = Raw(", ?");
  return f;
}

// One character of a JSON string: anything but '"', '\' and control bytes,
// or an escape (\uXXXX outside the surrogates, which strict parsers refuse
// unpaired).
Frag StringChar() {
  std::string plain = "[^\"\\\\";
  plain += '\0';
  plain += "-\x1f]";
  return Weighed(
      "(?:" + plain +
          R"(|\\["\\/bfnrt]|\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})))",
      kStringCharWeight);
}

Frag StringRegex(int min_len, int max_len) {
  static const Frag quote = Raw("\"");
  const Frag body = Repeat(StringChar(), min_len, max_len);
  return Concat({&quote, &body, &quote});
}

const Frag& IntegerRegex() {
  static const Frag f = Weighed("-?(?:0|[1-9][0-9]{0,15})", kIntegerWeight);
  return f;
}
const Frag& NumberRegex() {
  static const Frag f =
      Weighed("-?(?:0|[1-9][0-9]{0,15})(?:\\.[0-9]{1,15})?(?:[eE][+-]?[0-9]{1,2})?", kNumberWeight);
  return f;
}

Frag ArrayOf(const Frag& item, int min_items, int max_items) {
  static const Frag open = Raw("\\["), close = Raw("\\]");
  if (max_items == 0) return Raw("\\[\\]");
  const Frag more = Concat({&Comma(), &item});
  if (min_items == 0) {
    const Frag rest = Repeat(more, 0, max_items == -1 ? -1 : max_items - 1);
    const Frag some = Repeat(Concat({&item, &rest}), 0, 1);
    return Concat({&open, &some, &close});
  }
  const Frag rest = Repeat(more, min_items - 1, max_items == -1 ? -1 : max_items - 1);
  return Concat({&open, &item, &rest, &close});
}

// An object of any keys whose values match `value`.
Frag ObjectOf(const Frag& value) {
  static const Frag open = Raw("\\{"), close = Raw("\\}");
  const Frag key = StringRegex(0, -1);
  const Frag member = Concat({&key, &Colon(), &value});
  const Frag rest = Repeat(Concat({&Comma(), &member}), 0, -1);
  const Frag some = Repeat(Concat({&member, &rest}), 0, 1);
  return Concat({&open, &some, &close});
}

// Any JSON value nesting at most `depth` levels of objects and arrays.
Frag AnyValue(int depth) {
  std::vector<Frag> alts = {StringRegex(0, -1), NumberRegex(), Raw("true"), Raw("false"),
                            Raw("null")};
  if (depth > 0) {
    const Frag inner = AnyValue(depth - 1);
    alts.push_back(ObjectOf(inner));
    alts.push_back(ArrayOf(inner, 0, -1));
  }
  return Alternation(alts);
}

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool IsAnnotation(const std::string& key) {
  static const std::set<std::string> k = {"title",    "description", "$schema",  "$id",
                                          "$comment", "default",     "examples", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",    "definitions"};
  return k.count(key) > 0;
}

class Compiler {
 public:
  explicit Compiler(const Json& root) : root_(root) {}

  Status Compile(const Json& s, const std::string& path, int depth, Frag* out) {
    const std::string at = path.empty() ? "/" : path;
    if (depth > kMaxSchemaDepth)
      return Status::InvalidArgument("the schema nests deeper than " +
                                     std::to_string(kMaxSchemaDepth) + " levels at " + at);
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Status::InvalidArgument("the schema at " + at + " is false");
      *out = AnyValue(kAnyJsonDepth);
      return Status::Ok();
    }
    if (!s.is_object())
      return Status::InvalidArgument("the schema at " + at + " must be an object or a boolean");
    static const std::set<std::string> kKnown = {
        "type",      "properties", "required", "additionalProperties",
        "items",     "minItems",   "maxItems", "minLength",
        "maxLength", "enum",       "const",    "anyOf",
        "$ref"};
    std::vector<std::string> active;  // the non-annotation keywords present
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (IsAnnotation(it.key())) continue;
      if (!kKnown.count(it.key()))
        return Status::InvalidArgument("unsupported keyword '" + it.key() + "' at " + at);
      active.push_back(it.key());
    }
    for (const char* alone : {"$ref", "anyOf", "const", "enum"}) {
      if (!s.contains(alone)) continue;
      for (const std::string& k : active)
        if (k != alone && k != "type")
          return Status::InvalidArgument(std::string("'") + alone + "' together with '" + k +
                                         "' at " + at + " is not supported");
    }
    if (s.contains("$ref")) return Ref(s["$ref"], path, depth, out);
    if (s.contains("const")) {
      *out = Literal(Dump(s["const"]));
      return Status::Ok();
    }
    if (s.contains("enum")) return Enum(s["enum"], path + "/enum", out);
    if (s.contains("anyOf")) return AnyOf(s["anyOf"], path + "/anyOf", depth, out);

    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string())
            return Status::InvalidArgument("'type' at " + at + " must be a string or strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Status::InvalidArgument("'type' at " + at + " must be a string or strings");
      }
    } else if (s.contains("properties")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      *out = AnyValue(kAnyJsonDepth);
      return Status::Ok();
    }
    std::vector<Frag> alts;
    for (const std::string& t : types) {
      Frag f;
      BRAID_RETURN_IF_ERROR(OfType(s, t, path, depth, &f));
      alts.push_back(std::move(f));
    }
    *out = Alternation(alts);
    return Status::Ok();
  }

 private:
  Status OfType(const Json& s, const std::string& type, const std::string& path, int depth,
                Frag* out) {
    const std::string at = path.empty() ? "/" : path;
    if (type == "string") {
      int min_len = 0, max_len = -1;
      BRAID_RETURN_IF_ERROR(Count(s, "minLength", path, kMaxStringLength, &min_len));
      BRAID_RETURN_IF_ERROR(Count(s, "maxLength", path, kMaxStringLength, &max_len));
      if (max_len != -1 && max_len < min_len)
        return Status::InvalidArgument("maxLength is below minLength at " + at);
      if (min_len == -1) min_len = 0;
      *out = StringRegex(min_len, max_len);
    } else if (type == "integer") {
      *out = IntegerRegex();
    } else if (type == "number") {
      *out = NumberRegex();
    } else if (type == "boolean") {
      *out = Raw("(?:true|false)");
    } else if (type == "null") {
      *out = Raw("null");
    } else if (type == "array") {
      return Array(s, path, depth, out);
    } else if (type == "object") {
      return Object(s, path, depth, out);
    } else {
      return Status::InvalidArgument("unknown type '" + type + "' at " + at);
    }
    return Status::Ok();
  }

  // A non-negative integer keyword at most `limit` (-1 when absent).
  Status Count(const Json& s, const char* key, const std::string& path, int limit, int* out) {
    *out = -1;
    if (!s.contains(key)) return Status::Ok();
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return Status::InvalidArgument(std::string("'") + key + "' at " + path + "/" + key +
                                     " must be a non-negative integer");
    if (v.get<int64_t>() > limit)
      return Status::InvalidArgument(std::string("'") + key + "' at " + path + "/" + key +
                                     " is above the supported " + std::to_string(limit));
    *out = static_cast<int>(v.get<int64_t>());
    return Status::Ok();
  }

  Status Array(const Json& s, const std::string& path, int depth, Frag* out) {
    int min_items = 0, max_items = -1;
    BRAID_RETURN_IF_ERROR(Count(s, "minItems", path, kMaxItems, &min_items));
    BRAID_RETURN_IF_ERROR(Count(s, "maxItems", path, kMaxItems, &max_items));
    if (min_items == -1) min_items = 0;
    if (max_items != -1 && max_items < min_items)
      return Status::InvalidArgument("maxItems is below minItems at " + path);
    Frag item;
    if (s.contains("items")) {
      BRAID_RETURN_IF_ERROR(Compile(s["items"], path + "/items", depth + 1, &item));
    } else {
      item = AnyValue(kAnyJsonDepth);
    }
    *out = ArrayOf(item, min_items, max_items);
    return CheckWeight(*out, path);
  }

  Status Object(const Json& s, const std::string& path, int depth, Frag* out) {
    const std::string at = path.empty() ? "/" : path;
    if (!s.contains("properties")) {
      const bool closed = s.contains("additionalProperties") &&
                          s["additionalProperties"].is_boolean() &&
                          !s["additionalProperties"].get<bool>();
      *out = closed ? Raw("\\{\\}") : ObjectOf(AnyValue(kAnyJsonDepth - 1));
      return Status::Ok();
    }
    const Json& props = s["properties"];
    if (!props.is_object())
      return Status::InvalidArgument("'properties' at " + path + "/properties must be an object");
    if (props.size() > static_cast<size_t>(kMaxProperties))
      return Status::InvalidArgument("more than " + std::to_string(kMaxProperties) +
                                     " properties at " + path + "/properties");
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array())
        return Status::InvalidArgument("'required' at " + path + "/required must be an array");
      for (const Json& name : r) {
        if (!name.is_string())
          return Status::InvalidArgument("'required' at " + path + "/required must hold strings");
        if (!props.contains(name.get<std::string>()))
          return Status::InvalidArgument("required property '" + name.get<std::string>() + "' at " +
                                         path + "/required is not in 'properties'");
        required.insert(name.get<std::string>());
      }
    }
    // Each property as `"key": ?value`, in declared order.
    std::vector<Frag> members;
    std::vector<bool> is_required;
    for (auto it = props.begin(); it != props.end(); ++it) {
      Frag value;
      BRAID_RETURN_IF_ERROR(
          Compile(it.value(), path + "/properties/" + Escape(it.key()), depth + 1, &value));
      const Frag key = Literal(Dump(Json(it.key())));
      members.push_back(Concat({&key, &Colon(), &value}));
      is_required.push_back(required.count(it.key()) > 0);
    }
    static const Frag open = Raw("\\{"), close = Raw("\\}");
    const size_t n = members.size();
    if (n == 0) {
      *out = Raw("\\{\\}");
      return Status::Ok();
    }
    // Tails: tail[j] = what may follow once property j-1 was written
    // (", ?P" for required ones, "(?:, ?P)?" for optional ones).
    std::vector<Frag> tail(n + 1);
    for (size_t j = n; j-- > 0;) {
      const Frag item = Concat({&Comma(), &members[j]});
      const Frag part = is_required[j] ? item : Repeat(item, 0, 1);
      tail[j] = Concat({&part, &tail[j + 1]});
      if (tail[j].weight > kMaxWeight) return CheckWeight(tail[j], path);
    }
    // The first written property is any up to and including the first
    // required one; with none required the object may be empty.
    const size_t first_required =
        std::find(is_required.begin(), is_required.end(), true) - is_required.begin();
    std::vector<Frag> alts;
    size_t weight = 0;
    for (size_t i = 0; i < n && i <= first_required; ++i) {
      alts.push_back(Concat({&members[i], &tail[i + 1]}));
      weight += alts.back().weight;
      if (weight > kMaxWeight) return CheckWeight(alts.back(), path, weight);
    }
    Frag body = Alternation(alts);
    if (first_required == n) body = Repeat(body, 0, 1);
    *out = Concat({&open, &body, &close});
    return CheckWeight(*out, path);
  }

  Status Enum(const Json& e, const std::string& path, Frag* out) {
    if (!e.is_array() || e.empty())
      return Status::InvalidArgument("'enum' at " + path + " must be a non-empty array");
    std::vector<Frag> alts;
    for (const Json& v : e) alts.push_back(Literal(Dump(v)));
    *out = Alternation(alts);
    return CheckWeight(*out, path);
  }

  Status AnyOf(const Json& a, const std::string& path, int depth, Frag* out) {
    if (!a.is_array() || a.empty())
      return Status::InvalidArgument("'anyOf' at " + path + " must be a non-empty array");
    std::vector<Frag> alts;
    for (size_t i = 0; i < a.size(); ++i) {
      Frag f;
      BRAID_RETURN_IF_ERROR(Compile(a[i], path + "/" + std::to_string(i), depth + 1, &f));
      alts.push_back(std::move(f));
    }
    *out = Alternation(alts);
    return CheckWeight(*out, path);
  }

  Status Ref(const Json& ref, const std::string& path, int depth, Frag* out) {
    const std::string at = path + "/$ref";
    if (!ref.is_string()) return Status::InvalidArgument("'$ref' at " + at + " must be a string");
    const std::string r = ref.get<std::string>();
    const Json* target = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (r.rfind(p, 0) != 0) continue;
      const std::string name = r.substr(p.size());
      const std::string defs = p.substr(2, p.size() - 3);
      if (root_.is_object() && root_.contains(defs) && root_[defs].is_object() &&
          root_[defs].contains(name))
        target = &root_[defs][name];
    }
    if (!target)
      return Status::InvalidArgument("'$ref' at " + at + " ('" + r +
                                     "') is not a reference to #/$defs/NAME or "
                                     "#/definitions/NAME of this schema");
    if (std::find(refs_.begin(), refs_.end(), r) != refs_.end())
      return Status::InvalidArgument("'$ref' at " + at + " ('" + r +
                                     "') is recursive, which is not supported");
    refs_.push_back(r);
    Status st = Compile(*target, r.substr(1), depth + 1, out);
    refs_.pop_back();
    return st;
  }

  static Status CheckWeight(const Frag& f, const std::string& path, size_t weight = 0) {
    weight = std::max(weight, f.weight);
    if (weight <= kMaxWeight) return Status::Ok();
    return Status::InvalidArgument("the schema at " + (path.empty() ? "/" : path) +
                                   " is too large for constrained decoding (its regex weighs " +
                                   std::to_string(weight) + ", above " +
                                   std::to_string(kMaxWeight) +
                                   "; fewer optional properties or smaller bounds help)");
  }

  // A property name as a JSON Pointer token.
  static std::string Escape(const std::string& key) {
    std::string out;
    for (char c : key) {
      if (c == '~') {
        out += "~0";
      } else if (c == '/') {
        out += "~1";
      } else {
        out += c;
      }
    }
    return out;
  }

  const Json& root_;
  std::vector<std::string> refs_;  // the references being expanded
};

// The deepest nesting of arrays and objects in `text`, outside strings:
// checked before parsing, since printing parsed JSON (enum values) recurses.

}  // namespace

Result<std::string> JsonSchemaRegex(std::string_view schema_json) {
  auto parsed = ParseJsonBody(schema_json, kMaxJsonDepth);
  if (!parsed.ok()) return Status::InvalidArgument("the schema: " + parsed.status().message());
  const Json schema = std::move(parsed).value();
  Compiler c(schema);
  Frag f;
  BRAID_RETURN_IF_ERROR(c.Compile(schema, "", 0, &f));
  if (f.weight > kMaxWeight)
    return Status::InvalidArgument(
        "the schema is too large for constrained decoding (its regex "
        "weighs " +
        std::to_string(f.weight) + ", above " + std::to_string(kMaxWeight) + ")");
  return f.re;
}

std::string JsonObjectRegex() { return ObjectOf(AnyValue(kAnyJsonDepth)).re; }

}  // namespace braid::http
