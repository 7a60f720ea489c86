// libFuzzer target for the JSON Schema compiler of response_format: the
// input is the schema's JSON text. JsonSchemaRegex must fail cleanly
// (InvalidArgument) or return a regex that the runtime's regex engine
// compiles: its size bound promises that accepted schemas stay within the
// engine's bounds.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "http/json_schema.h"
#include "runtime/constraint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto re = braid::http::JsonSchemaRegex(input);
  if (!re.ok()) {
    if (re.status().code() != braid::StatusCode::kInvalidArgument) {
      std::fprintf(stderr, "fuzz_json_schema: an error that is not InvalidArgument: %s\n",
                   re.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  auto compiled = braid::rt::RegexConstraint::Compile(*re);
  if (!compiled.ok()) {
    std::fprintf(stderr, "fuzz_json_schema: an accepted schema's regex does not compile: %s\n",
                 compiled.status().message().c_str());
    std::abort();
  }
  return 0;
}
