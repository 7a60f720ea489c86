#include "cli/engines_file.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/file_util.h"

namespace braid::cli {
namespace {

using nlohmann::json;

constexpr size_t kMaxEnginesFileBytes = size_t{1} << 20;
constexpr size_t kMaxKeyFileBytes = size_t{64} << 10;
constexpr int kMaxThreads = 4096;

// Builds the messages of one entry: "engines file 'p': engines[i] ("name"): ...".
class EntryErrors {
 public:
  EntryErrors(const std::string& path, size_t index) : path_(path), index_(index) {}
  void set_name(const std::string& name) { name_ = name; }
  std::string Prefix() const {
    std::string p = "engines file '" + path_ + "': engines[" + std::to_string(index_) + "]";
    if (!name_.empty()) p += " (\"" + name_ + "\")";
    return p + ": ";
  }
  Status Field(const std::string& field, const std::string& what) const {
    return Status::InvalidArgument(Prefix() + "field '" + field + "': " + what);
  }

 private:
  const std::string& path_;
  size_t index_;
  std::string name_;
};

// A required (or, with `required` false, optional) non-empty string field.
Status ReadString(const json& e, const char* field, bool required, const EntryErrors& err,
                  std::string* out) {
  auto it = e.find(field);
  if (it == e.end()) return required ? err.Field(field, "is missing") : Status::Ok();
  if (!it->is_string()) return err.Field(field, "must be a string");
  *out = it->get<std::string>();
  if (out->empty()) return err.Field(field, "must not be empty");
  return Status::Ok();
}

std::string Resolve(const std::string& file, const std::string& p) {
  const std::filesystem::path rel(p);
  if (rel.is_absolute()) return p;
  const std::filesystem::path dir = std::filesystem::path(file).parent_path();
  return dir.empty() ? p : (dir / rel).string();
}

// The first non-empty line of the key file, without surrounding blanks.
Result<std::string> ReadKey(const std::string& key_path, const EntryErrors& err) {
  std::string text;
  Status s = ReadRegularFile(key_path, kMaxKeyFileBytes, &text);
  if (!s.ok()) return Status(s.code(), err.Prefix() + "field 'api_key_file': " + s.message());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    const size_t a = line.find_first_not_of(" \t\r");
    if (a != std::string::npos) {
      const size_t b = line.find_last_not_of(" \t\r");
      return line.substr(a, b - a + 1);
    }
    pos = end + 1;
  }
  return err.Field("api_key_file", "'" + key_path + "' holds no key");
}

Result<EngineSpec> ReadEntry(const json& e, const std::string& path, size_t index) {
  EntryErrors err(path, index);
  if (!e.is_object())
    return Status::InvalidArgument(err.Prefix() + "must be an object with name and kind");
  EngineSpec spec;
  BRAID_RETURN_IF_ERROR(ReadString(e, "name", true, err, &spec.name));
  err.set_name(spec.name);
  std::string kind;
  BRAID_RETURN_IF_ERROR(ReadString(e, "kind", true, err, &kind));
  std::set<std::string> allowed = {"name", "kind", "model"};
  if (kind == "embedded") {
    spec.kind = EngineSpec::Kind::kEmbedded;
    allowed.insert("threads");
  } else if (kind == "remote") {
    spec.kind = EngineSpec::Kind::kRemote;
    allowed.insert({"url", "api_key_file", "prompt"});
  } else {
    return err.Field("kind", "must be \"embedded\" or \"remote\", got \"" + kind + "\"");
  }
  for (const auto& [key, value] : e.items())
    if (!allowed.count(key))
      return err.Field(key, "is not a field of a" + std::string(kind == "embedded" ? "n " : " ") +
                                kind + " engine");
  std::string model;
  BRAID_RETURN_IF_ERROR(ReadString(e, "model", true, err, &model));
  if (spec.kind == EngineSpec::Kind::kEmbedded) {
    spec.model_path = Resolve(path, model);
    if (auto t = e.find("threads"); t != e.end()) {
      if (!t->is_number_integer() || t->get<int64_t>() < 1 || t->get<int64_t>() > kMaxThreads)
        return err.Field("threads", "must be an integer from 1 to " + std::to_string(kMaxThreads));
      spec.threads = static_cast<int>(t->get<int64_t>());
    }
    return spec;
  }
  spec.model_name = model;
  BRAID_RETURN_IF_ERROR(ReadString(e, "url", true, err, &spec.url));
  if (spec.url.starts_with("https://"))
    return Status::Unsupported(err.Prefix() +
                               "field 'url': https is not supported; give an "
                               "http:// url");
  if (!spec.url.starts_with("http://") || spec.url.size() == 7)
    return err.Field("url", "must start with http:// and name a host, got \"" + spec.url + "\"");
  std::string prompt;
  BRAID_RETURN_IF_ERROR(ReadString(e, "prompt", false, err, &prompt));
  if (!prompt.empty() && prompt != "tokens" && prompt != "text")
    return err.Field("prompt", "must be \"tokens\" or \"text\", got \"" + prompt + "\"");
  spec.text_prompt = prompt == "text";
  std::string key_file;
  BRAID_RETURN_IF_ERROR(ReadString(e, "api_key_file", false, err, &key_file));
  if (!key_file.empty()) {
    BRAID_ASSIGN_OR_RETURN(spec.api_key, ReadKey(Resolve(path, key_file), err));
  }
  return spec;
}

}  // namespace

Result<std::vector<EngineSpec>> ParseEnginesFile(const std::string& text, const std::string& path) {
  const std::string where = "engines file '" + path + "': ";
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument(where + "not valid JSON");
  if (!doc.is_object())
    return Status::InvalidArgument(where + "must be an object {\"engines\": [...]}");
  auto list = doc.find("engines");
  if (list == doc.end()) return Status::InvalidArgument(where + "field 'engines' is missing");
  if (!list->is_array()) return Status::InvalidArgument(where + "field 'engines' must be an array");
  if (list->empty()) return Status::InvalidArgument(where + "field 'engines' lists no engine");
  for (const auto& [key, value] : doc.items())
    if (key != "engines")
      return Status::InvalidArgument(where + "field '" + key + "' is not known (only 'engines')");
  std::vector<EngineSpec> out;
  std::set<std::string> names;
  for (size_t i = 0; i < list->size(); ++i) {
    BRAID_ASSIGN_OR_RETURN(EngineSpec spec, ReadEntry((*list)[i], path, i));
    if (!names.insert(spec.name).second)
      return Status::InvalidArgument(where + "engines[" + std::to_string(i) +
                                     "]: field 'name': \"" + spec.name +
                                     "\" is already the name of another engine");
    out.push_back(std::move(spec));
  }
  return out;
}

Result<std::vector<EngineSpec>> ReadEnginesFile(const std::string& path) {
  std::string text;
  Status s = ReadRegularFile(path, kMaxEnginesFileBytes, &text);
  if (!s.ok()) return Status(s.code(), "engines file: " + s.message());
  return ParseEnginesFile(text, path);
}

}  // namespace braid::cli
