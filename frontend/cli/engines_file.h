// The engines file: which engines a stack runs, embedded and remote.
//
//   {"engines": [
//     {"name": "local0", "kind": "embedded", "model": "models/smollm2.gguf", "threads": 2},
//     {"name": "far", "kind": "remote", "url": "http://127.0.0.1:8081",
//      "model": "smollm2", "api_key_file": "keys.txt"}
//   ]}
//
// Fields per kind (any other field is an error, so that a misspelt one is
// not silently ignored):
//   embedded: name, kind, model (a GGUF file or checkpoint directory),
//             threads (optional, positive; 0 when absent = the command
//             line's choice)
//   remote:   name, kind, url (http://host:port[/path]), model (the server's
//             name for it), api_key_file (optional; the first non-empty line
//             of that file, trimmed, is the key), prompt (optional:
//             "tokens", the default, or "text" for a server that takes no
//             token-id prompts; the prompt is then sent as text)
// Relative paths (model of an embedded engine, api_key_file) are taken
// relative to the engines file's directory. Names must be unique and
// non-empty.
#pragma once

#include <string>
#include <vector>

#include "engine/status.h"

namespace braid::cli {

struct EngineSpec {
  enum class Kind { kEmbedded, kRemote };
  std::string name;
  Kind kind = Kind::kEmbedded;
  // embedded
  std::string model_path;  // resolved against the file's directory
  int threads = 0;         // 0 = not given
  // remote
  std::string url;
  std::string model_name;
  std::string api_key;       // from api_key_file; empty when none was given
  bool text_prompt = false;  // "prompt": "text": the server takes no token ids
};

// Reads and checks the engines file at `path`. Errors name the file, the
// entry's index (and name, once known) and the field:
//   "engines file 'e.json': engines[1] (\"far\"): field 'url': must start with http://"
// kIoError when the file (or a key file) cannot be read, kInvalidArgument for
// bad contents, kUnsupported for an https url.
Result<std::vector<EngineSpec>> ReadEnginesFile(const std::string& path);

// The same from the file's text; `path` is used in messages and to resolve
// relative paths.
Result<std::vector<EngineSpec>> ParseEnginesFile(const std::string& text, const std::string& path);

}  // namespace braid::cli
