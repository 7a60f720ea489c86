// libFuzzer target for the regex compiler of `regex` outputs: the input up to
// its first NUL byte is the pattern, the rest (or, without a NUL, the pattern
// itself) a text to match. Compile must fail cleanly or give a DFA whose every
// state can still reach a match (the pruning promise of regex_dfa.h) and whose
// transitions stay in range; FullMatch must agree with a walk byte by byte.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "exec/regex_dfa.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_regex: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view pattern = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? pattern : input.substr(nul + 1);

  auto compiled = braid::rt::RegexDfa::Compile(pattern);
  if (!compiled.ok()) {
    if (compiled.status().message().rfind("regex: ", 0) != 0)
      Fail("an error without the 'regex: ' prefix");
    return 0;
  }
  const braid::rt::RegexDfa& dfa = *compiled;
  const int n = static_cast<int>(dfa.num_states());
  if (n == 0) Fail("no states");
  for (int s = 0; s < n; ++s) {
    if (!dfa.Accepting(s) && !dfa.CanContinue(s)) Fail("a live state that cannot reach a match");
    for (int b = 0; b < 256; ++b) {
      const int t = dfa.Next(s, static_cast<uint8_t>(b));
      if (t != braid::rt::RegexDfa::kDead && (t < 0 || t >= n)) Fail("a transition out of range");
    }
  }
  int state = dfa.start();
  for (char c : text) state = dfa.Next(state, static_cast<uint8_t>(c));
  if (dfa.FullMatch(text) != dfa.Accepting(state)) Fail("FullMatch disagrees with the walk");
  if (dfa.Walk(dfa.start(), text) != state) Fail("Walk disagrees with Next");
  return 0;
}
