// libFuzzer target for what a remote engine reads from a server: the input is
// a response body. The server-sent-events framing must not depend on where
// the reads split the bytes (the events from one read and from two reads,
// split at a place the input picks, must be the same), and every event's
// chunk and every error body must parse or fail cleanly (kCorruption).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "remote/openai_stream.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_openai_stream: %s\n", what);
  std::abort();
}

std::vector<std::string> Events(std::string_view body, size_t split) {
  braid::remote::SseReader r;
  std::vector<std::string> out;
  r.Feed(body.substr(0, split), &out);
  r.Feed(body.substr(split), &out);
  if (auto last = r.Finish()) out.push_back(*last);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const size_t split = size ? data[0] % (size + 1) : 0;
  const std::vector<std::string> whole = Events(body, size), parts = Events(body, split);
  if (whole != parts) Fail("events depend on how the body was split");
  for (const std::string& e : whole) {
    auto chunk = braid::remote::ParseCompletionChunk(e);
    if (!chunk.ok() && chunk.status().code() != braid::StatusCode::kCorruption)
      Fail("a bad chunk failed with a code other than kCorruption");
  }
  (void)braid::remote::ErrorBodyMessage(body);
  return 0;
}
