// libFuzzer target for the template parser of semantic functions: the input
// is a template. Parse must fail cleanly (an error naming the function) or
// give pieces that refer to its own inputs and outputs, with every regex
// output's pattern compiling on its own.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "exec/regex_dfa.h"
#include "runtime/runtime.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_template: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using braid::rt::OutputSpec;
  using braid::rt::SemanticFunction;
  const std::string prompt(reinterpret_cast<const char*>(data), size);
  auto parsed = SemanticFunction::Parse({"fz", "", prompt});
  if (!parsed.ok()) {
    if (parsed.status().message().rfind("fz", 0) != 0)
      Fail("an error that does not name the function");
    return 0;
  }
  const SemanticFunction& fn = **parsed;
  if (fn.outputs().empty()) Fail("parsed without an output");
  const std::set<std::string> inputs(fn.inputs().begin(), fn.inputs().end());
  if (inputs.size() != fn.inputs().size()) Fail("an input listed twice");
  std::set<std::string> outputs;
  for (const OutputSpec& o : fn.outputs()) {
    if (o.name.empty() || !outputs.insert(o.name).second) Fail("an empty or repeated output name");
    if (inputs.count(o.name)) Fail("a name both input and output");
    if (o.kind == OutputSpec::Kind::kSelect && o.choices.empty()) Fail("a select without choices");
    if (o.kind == OutputSpec::Kind::kRegex && !braid::rt::RegexDfa::Compile(o.pattern).ok())
      Fail("a regex output whose pattern does not compile");
  }
  size_t text_bytes = 0;
  for (const auto& p : fn.pieces()) {
    using Kind = SemanticFunction::Piece::Kind;
    if (p.kind == Kind::kText) text_bytes += p.text.size();
    if (p.kind == Kind::kInput && !inputs.count(p.text))
      Fail("an input piece that is not an input");
    if (p.kind == Kind::kOutput &&
        (p.output < 0 || static_cast<size_t>(p.output) >= fn.outputs().size() ||
         fn.outputs()[static_cast<size_t>(p.output)].name != p.text))
      Fail("an output piece that is not its output");
  }
  if (text_bytes > prompt.size()) Fail("more text than the template holds");
  return 0;
}
