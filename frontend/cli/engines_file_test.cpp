// The engines file: what a good file gives, and that each kind of mistake is
// refused with the file, the entry and the field named.
#include "cli/engines_file.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace braid;
using braid::cli::EngineSpec;
using braid::cli::ParseEnginesFile;
using braid::cli::ReadEnginesFile;

namespace {

// A fresh directory under the temporary directory, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("braid_engines_file_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = (path / name).string();
    std::ofstream(p) << text;
    return p;
  }
};

// The error of parsing `text` as "e.json".
Status ErrorOf(const std::string& text) {
  auto r = ParseEnginesFile(text, "e.json");
  REQUIRE_FALSE(r.ok());
  return r.status();
}

}  // namespace

TEST_CASE("engines file: embedded and remote entries, relative paths, the key file") {
  TempDir dir;
  dir.Write("keys.txt", "\n   sk-first  \nsk-second\n");
  const std::string path = dir.Write("engines.json", R"({"engines": [
    {"name": "local0", "kind": "embedded", "model": "models/m.gguf", "threads": 2},
    {"name": "local1", "kind": "embedded", "model": "/abs/m.gguf"},
    {"name": "far", "kind": "remote", "url": "http://127.0.0.1:8081", "model": "smollm2",
     "api_key_file": "keys.txt"},
    {"name": "open", "kind": "remote", "url": "http://10.0.0.2:8000/v1", "model": "llama"}
  ]})");
  auto r = ReadEnginesFile(path);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  REQUIRE(r->size() == 4);
  const EngineSpec& a = r->at(0);
  CHECK(a.name == "local0");
  CHECK(a.kind == EngineSpec::Kind::kEmbedded);
  CHECK(a.model_path == (dir.path / "models/m.gguf").string());
  CHECK(a.threads == 2);
  CHECK(r->at(1).model_path == "/abs/m.gguf");
  CHECK(r->at(1).threads == 0);
  const EngineSpec& far = r->at(2);
  CHECK(far.kind == EngineSpec::Kind::kRemote);
  CHECK(far.url == "http://127.0.0.1:8081");
  CHECK(far.model_name == "smollm2");
  CHECK(far.api_key == "sk-first");
  CHECK(r->at(3).api_key.empty());
}

TEST_CASE("engines file: unreadable files and bad JSON name the file") {
  TempDir dir;
  auto missing = ReadEnginesFile((dir.path / "nope.json").string());
  CHECK(missing.status().code() == StatusCode::kIoError);
  CHECK(missing.status().message().find("nope.json") != std::string::npos);
  auto not_file = ReadEnginesFile(dir.path.string());
  CHECK_FALSE(not_file.ok());
  CHECK(not_file.status().message().find("not a regular file") != std::string::npos);

  CHECK(ErrorOf("{").message() == "engines file 'e.json': not valid JSON");
  CHECK(ErrorOf("[]").message().find("must be an object") != std::string::npos);
  CHECK(ErrorOf("{}").message() == "engines file 'e.json': field 'engines' is missing");
  CHECK(ErrorOf(R"({"engines": {}})").message().find("must be an array") != std::string::npos);
  CHECK(ErrorOf(R"({"engines": []})").message().find("lists no engine") != std::string::npos);
  CHECK(ErrorOf(R"({"engines": [{"name": "a", "kind": "embedded", "model": "m"}], "x": 1})")
            .message()
            .find("field 'x' is not known") != std::string::npos);
}

TEST_CASE("engines file: each entry's mistakes name the index, the name and the field") {
  struct Case {
    const char* entry;
    const char* message;
  };
  const Case cases[] = {
      {R"(3)", "engines[1]: must be an object"},
      {R"({"kind": "remote"})", "engines[1]: field 'name': is missing"},
      {R"({"name": 5, "kind": "remote"})", "engines[1]: field 'name': must be a string"},
      {R"({"name": "", "kind": "remote"})", "engines[1]: field 'name': must not be empty"},
      {R"({"name": "b"})", "engines[1] (\"b\"): field 'kind': is missing"},
      {R"({"name": "b", "kind": "cloud"})",
       "engines[1] (\"b\"): field 'kind': must be \"embedded\" or \"remote\", got \"cloud\""},
      {R"({"name": "b", "kind": "embedded"})", "engines[1] (\"b\"): field 'model': is missing"},
      {R"({"name": "b", "kind": "embedded", "model": "m", "threads": 0})",
       "engines[1] (\"b\"): field 'threads': must be an integer from 1 to 4096"},
      {R"({"name": "b", "kind": "embedded", "model": "m", "threads": "2"})",
       "engines[1] (\"b\"): field 'threads': must be an integer"},
      {R"({"name": "b", "kind": "embedded", "model": "m", "url": "http://h:1"})",
       "engines[1] (\"b\"): field 'url': is not a field of an embedded engine"},
      {R"({"name": "b", "kind": "remote", "model": "m", "threads": 2, "url": "http://h:1"})",
       "engines[1] (\"b\"): field 'threads': is not a field of a remote engine"},
      {R"({"name": "b", "kind": "remote", "model": "m"})",
       "engines[1] (\"b\"): field 'url': is missing"},
      {R"({"name": "b", "kind": "remote", "url": "http://h:1"})",
       "engines[1] (\"b\"): field 'model': is missing"},
      {R"({"name": "b", "kind": "remote", "model": "m", "url": "h:1"})",
       "engines[1] (\"b\"): field 'url': must start with http://"},
      {R"({"name": "b", "kind": "remote", "model": "m", "url": "http://"})",
       "engines[1] (\"b\"): field 'url': must start with http:// and name a host"},
      {R"({"name": "a", "kind": "remote", "model": "m", "url": "http://h:1"})",
       "engines[1]: field 'name': \"a\" is already the name of another engine"},
      {R"({"name": "b", "kind": "remote", "model": "m", "url": "http://h:1", "api_key_file": 1})",
       "engines[1] (\"b\"): field 'api_key_file': must be a string"},
  };
  for (const Case& c : cases) {
    const std::string text = std::string(R"({"engines": [{"name": "a", "kind": "embedded", )") +
                             R"("model": "m"}, )" + c.entry + "]}";
    CAPTURE(text);
    const Status s = ErrorOf(text);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().rfind("engines file 'e.json': ", 0) == 0);
    CHECK_MESSAGE(s.message().find(c.message) != std::string::npos, s.message());
  }
  const Status https = ErrorOf(
      R"({"engines": [{"name": "s", "kind": "remote", "model": "m", "url": "https://h:1"}]})");
  CHECK(https.code() == StatusCode::kUnsupported);
  CHECK(https.message().find("engines[0] (\"s\"): field 'url': https is not supported") !=
        std::string::npos);
}

TEST_CASE("engines file: a key file that is missing or empty is an error naming it") {
  TempDir dir;
  dir.Write("empty.txt", " \n\t\n");
  const std::string missing = dir.Write("a.json", R"({"engines": [{"name": "far", "kind": "remote",
      "url": "http://h:1", "model": "m", "api_key_file": "none.txt"}]})");
  auto r = ReadEnginesFile(missing);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kIoError);
  CHECK(r.status().message().find("engines[0] (\"far\"): field 'api_key_file': cannot open") !=
        std::string::npos);
  CHECK(r.status().message().find("none.txt") != std::string::npos);
  const std::string empty = dir.Write("b.json", R"({"engines": [{"name": "far", "kind": "remote",
      "url": "http://h:1", "model": "m", "api_key_file": "empty.txt"}]})");
  r = ReadEnginesFile(empty);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("holds no key") != std::string::npos);
}
