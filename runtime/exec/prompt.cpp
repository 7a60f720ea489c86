#include "exec/prompt.h"

#include <cstdio>

namespace braid::rt {
namespace {

Status TooLong(size_t max_bytes) {
  return Status::OutOfRange("the rendered prompt is more than " + std::to_string(max_bytes) +
                            " bytes (RunOptions::max_value_bytes)");
}

// The template up to `output`: literals as allow_special pieces, inputs and
// earlier outputs as plain pieces. `bytes` already rendered (the messages)
// count against `max_bytes`.
Result<std::vector<PromptPiece>> RenderTemplate(const Dag& dag, const DagNode& n, int output,
                                                const std::map<std::string, std::string>& values,
                                                size_t bytes, size_t max_bytes) {
  std::vector<PromptPiece> out;
  auto append = [&](const std::string& text, bool allow_special) {
    bytes += text.size();
    if (bytes > max_bytes) return false;
    AppendPiece(out, text, allow_special);
    return true;
  };
  for (const auto& p : n.fn->pieces()) {
    bool ok = true;
    if (p.kind == SemanticFunction::Piece::Kind::kText) {
      ok = append(p.text, /*allow_special=*/true);
    } else if (p.kind == SemanticFunction::Piece::Kind::kInput) {
      ok = append(ArgValue(dag, n.args.at(p.text)), /*allow_special=*/false);
    } else {
      if (p.output >= output) break;
      auto it = values.find(p.text);
      if (it != values.end()) ok = append(it->second, /*allow_special=*/false);
    }
    if (!ok) return TooLong(max_bytes);
  }
  return out;
}

// The turns before the prompt of a chat-style call: its system text, then
// its messages with their inputs substituted; *bytes is their size. Message
// contents are plain text, their literal parts included: FormatChat marks
// them up, and only its markup yields special tokens.
Result<std::vector<ChatMessage>> RenderMessages(const Dag& dag, const DagNode& n, size_t* bytes,
                                                size_t max_bytes) {
  const FunctionSpec& spec = n.fn->spec();
  std::vector<ChatMessage> out;
  *bytes = spec.system.size();
  if (!spec.system.empty()) out.push_back({"system", spec.system});
  for (size_t i = 0; i < spec.messages.size(); ++i) {
    ChatMessage m{spec.messages[i].role, ""};
    for (const auto& p : n.fn->message_pieces()[i]) {
      const std::string& part = p.kind == SemanticFunction::Piece::Kind::kInput
                                    ? ArgValue(dag, n.args.at(p.text))
                                    : p.text;
      *bytes += part.size();
      if (*bytes > max_bytes) break;
      m.content += part;
    }
    out.push_back(std::move(m));
  }
  if (*bytes > max_bytes) return TooLong(max_bytes);
  return out;
}

}  // namespace

Result<CallPrompt> RenderCallPrompt(const Model& model, const Dag& dag, const DagNode& n,
                                    int output, const std::map<std::string, std::string>& values,
                                    size_t max_bytes) {
  std::vector<ChatMessage> msgs;
  size_t bytes = 0;
  if (n.fn->chat()) {
    BRAID_ASSIGN_OR_RETURN(msgs, RenderMessages(dag, n, &bytes, max_bytes));
  }
  CallPrompt p;
  BRAID_ASSIGN_OR_RETURN(p.pieces, RenderTemplate(dag, n, output, values, bytes, max_bytes));
  if (n.fn->chat()) {
    // Chat style: the system text and messages, then the rendered template
    // as the final user message; every content is plain text, and only the
    // chat template's markup yields special tokens.
    msgs.push_back({"user", JoinPieces(p.pieces)});
    p.pieces = model.FormatChat(msgs, /*add_generation_prompt=*/true);
  }
  p.tokens = model.Tokenize(p.pieces);
  if (p.tokens.empty()) return Status::InvalidArgument("the rendered prompt is empty");
  return p;
}

std::string CallKeyString(const Dag& dag, const DagNode& n) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  for (const auto& name : n.fn->inputs()) {
    mix(name);
    mix(ArgValue(dag, n.args.at(name)));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return n.key.path + "#" + std::to_string(n.key.index) + "#" + n.fn->spec().name + "#" + hex;
}

}  // namespace braid::rt
