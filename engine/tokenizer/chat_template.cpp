// Chat templates of the four families, written out by hand to match the Jinja
// templates the models ship (checked against jinja2 renderings in
// tests/fixtures/tokenizer/chat_templates.json).
#include <string>

#include "tokenizer/tokenizer.h"

namespace braid {
namespace {

// Jinja's trim / Python's str.strip(): leading and trailing white space.
std::string Strip(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

// <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
std::string RenderChatML(std::span<const ChatMessage> msgs, bool gen, std::string_view default_system) {
  std::string out;
  if (!msgs.empty() && msgs[0].role != "system" && !default_system.empty()) {
    out += "<|im_start|>system\n";
    out += default_system;
    out += "<|im_end|>\n";
  }
  for (const ChatMessage& m : msgs) {
    out += "<|im_start|>";
    out += m.role;
    out += '\n';
    out += m.content;
    out += "<|im_end|>\n";
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// Llama 3: <|begin_of_text|> then <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>.
std::string RenderLlama3(std::span<const ChatMessage> msgs, bool gen) {
  std::string out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0) out += "<|begin_of_text|>";
    out += "<|start_header_id|>";
    out += msgs[i].role;
    out += "<|end_header_id|>\n\n";
    out += Strip(msgs[i].content);
    out += "<|eot_id|>";
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Llama 2: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
std::string RenderLlama2(std::span<const ChatMessage> msgs) {
  std::string out;
  std::string system;
  bool has_system = false;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = msgs[0].content;
    has_system = true;
    msgs = msgs.subspan(1);
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    std::string content = msgs[i].content;
    if (i == 0 && has_system) content.insert(0, "<<SYS>>\n" + system + "\n<</SYS>>\n\n");
    if (msgs[i].role == "user") {
      out += "<s>[INST] ";
      out += Strip(content);
      out += " [/INST]";
    } else if (msgs[i].role == "assistant") {
      out += ' ';
      out += Strip(content);
      out += " </s>";
    }
  }
  return out;
}

// Mistral: <s>[INST] {user} [/INST]{assistant}</s>; a system message is put
// in front of the first user message, separated by a blank line.
std::string RenderMistral(std::span<const ChatMessage> msgs) {
  std::string out = "<s>";
  std::string system;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = msgs[0].content;
    msgs = msgs.subspan(1);
  }
  bool first_user = true;
  for (const ChatMessage& m : msgs) {
    if (m.role == "user") {
      std::string content = m.content;
      if (first_user && !system.empty()) content.insert(0, system + "\n\n");
      first_user = false;
      out += "[INST] ";
      out += content;
      out += " [/INST]";
    } else if (m.role == "assistant") {
      out += m.content;
      out += "</s>";
    }
  }
  return out;
}

}  // namespace

ChatFormat DetectChatFormat(std::string_view t, ChatFormat fallback) {
  if (t.find("<|im_start|>") != std::string_view::npos) return ChatFormat::kChatML;
  if (t.find("<|start_header_id|>") != std::string_view::npos) return ChatFormat::kLlama3;
  if (t.find("[INST]") != std::string_view::npos) {
    return t.find("<<SYS>>") != std::string_view::npos ? ChatFormat::kLlama2 : ChatFormat::kMistral;
  }
  return fallback;
}

std::string ApplyChatTemplate(ChatFormat format, std::span<const ChatMessage> messages, bool add_generation_prompt,
                              std::string_view default_system) {
  switch (format) {
    case ChatFormat::kChatML: return RenderChatML(messages, add_generation_prompt, default_system);
    case ChatFormat::kLlama3: return RenderLlama3(messages, add_generation_prompt);
    case ChatFormat::kLlama2: return RenderLlama2(messages);
    case ChatFormat::kMistral: return RenderMistral(messages);
  }
  return {};
}

}  // namespace braid
