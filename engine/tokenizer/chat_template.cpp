// Chat templates of the five families, written out by hand to match the Jinja
// templates the models ship (checked against jinja2 renderings in
// tests/fixtures/tokenizer/chat_templates.json and gemma3_chat_templates.json).
// Each renders pieces: the template's markup may hold special tokens, roles
// and message contents may not, so that a message cannot open or close a turn.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace braid {
namespace {

// Python's str.isspace, which Jinja's trim and str.strip() use: Unicode
// White_Space, and U+001C..U+001F.
bool IsPySpace(uint32_t cp) {
  return (unicode::Flags(cp) & unicode::kSpace) != 0 || (cp >= 0x1C && cp <= 0x1F);
}

// The byte length of the white space that `s` starts with.
size_t LeadingSpace(std::string_view s) {
  std::vector<unicode::Char> chars;
  unicode::Decode(s, chars);
  for (const unicode::Char& c : chars)
    if (!IsPySpace(c.cp)) return c.offset;
  return s.size();
}

// The byte length of `s` without the white space it ends with.
size_t WithoutTrailingSpace(std::string_view s) {
  std::vector<unicode::Char> chars;
  unicode::Decode(s, chars);
  for (size_t i = chars.size(); i > 0; --i) {
    if (!IsPySpace(chars[i - 1].cp)) return i < chars.size() ? chars[i].offset : s.size();
  }
  return 0;
}

// Builds the pieces of a rendering: markup may hold special tokens, message
// text may not.
class Pieces {
 public:
  Pieces& Markup(std::string_view text) {
    AppendPiece(out_, text, true);
    return *this;
  }
  Pieces& Text(std::string_view text) {
    AppendPiece(out_, text, false);
    return *this;
  }
  Pieces& Add(std::vector<PromptPiece> pieces) {
    for (PromptPiece& p : pieces) AppendPiece(out_, p.text, p.allow_special);
    return *this;
  }
  std::vector<PromptPiece> Take() { return std::move(out_); }

 private:
  std::vector<PromptPiece> out_;
};

// Jinja's trim / Python's str.strip() over the joined text of `pieces`:
// leading and trailing white space, whichever pieces it lies in.
std::vector<PromptPiece> Strip(std::vector<PromptPiece> pieces) {
  for (auto it = pieces.begin(); it != pieces.end(); ++it) {
    it->text.erase(0, LeadingSpace(it->text));
    if (!it->text.empty()) break;
  }
  for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
    it->text.resize(WithoutTrailingSpace(it->text));
    if (!it->text.empty()) break;
  }
  std::erase_if(pieces, [](const PromptPiece& p) { return p.text.empty(); });
  return pieces;
}

std::vector<PromptPiece> Plain(std::string_view text) {
  std::vector<PromptPiece> out;
  AppendPiece(out, text, false);
  return out;
}

// <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
std::vector<PromptPiece> RenderChatML(std::span<const ChatMessage> msgs, bool gen,
                                      std::string_view default_system) {
  Pieces out;
  if (!msgs.empty() && msgs[0].role != "system" && !default_system.empty()) {
    out.Markup("<|im_start|>system\n").Text(default_system).Markup("<|im_end|>\n");
  }
  for (const ChatMessage& m : msgs) {
    out.Markup("<|im_start|>").Text(m.role).Markup("\n").Text(m.content).Markup("<|im_end|>\n");
  }
  if (gen) out.Markup("<|im_start|>assistant\n");
  return out.Take();
}

// Llama 3: <|begin_of_text|> then
// <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>.
std::vector<PromptPiece> RenderLlama3(std::span<const ChatMessage> msgs, bool gen) {
  Pieces out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0) out.Markup("<|begin_of_text|>");
    out.Markup("<|start_header_id|>").Text(msgs[i].role).Markup("<|end_header_id|>\n\n");
    out.Add(Strip(Plain(msgs[i].content))).Markup("<|eot_id|>");
  }
  if (gen) out.Markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out.Take();
}

// A leading system message, taken off `msgs` (templates that fold it into
// the first turn); nullopt when there is none.
std::optional<std::string_view> TakeSystem(std::span<const ChatMessage>& msgs) {
  if (msgs.empty() || msgs[0].role != "system") return std::nullopt;
  const std::string_view system = msgs[0].content;
  msgs = msgs.subspan(1);
  return system;
}

// Llama 2: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
std::vector<PromptPiece> RenderLlama2(std::span<const ChatMessage> msgs) {
  Pieces out;
  const std::optional<std::string_view> system = TakeSystem(msgs);
  for (size_t i = 0; i < msgs.size(); ++i) {
    Pieces content;
    if (i == 0 && system) content.Markup("<<SYS>>\n").Text(*system).Markup("\n<</SYS>>\n\n");
    content.Text(msgs[i].content);
    if (msgs[i].role == "user") {
      out.Markup("<s>[INST] ").Add(Strip(content.Take())).Markup(" [/INST]");
    } else if (msgs[i].role == "assistant") {
      out.Markup(" ").Add(Strip(content.Take())).Markup(" </s>");
    }
  }
  return out.Take();
}

// Mistral: <s>[INST] {user} [/INST]{assistant}</s>; a system message is put
// in front of the first user message, separated by a blank line.
std::vector<PromptPiece> RenderMistral(std::span<const ChatMessage> msgs) {
  Pieces out;
  out.Markup("<s>");
  std::string_view system;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = msgs[0].content;
    msgs = msgs.subspan(1);
  }
  bool first_user = true;
  for (const ChatMessage& m : msgs) {
    if (m.role == "user") {
      out.Markup("[INST] ");
      if (first_user && !system.empty()) out.Text(system).Markup("\n\n");
      first_user = false;
      out.Text(m.content).Markup(" [/INST]");
    } else if (m.role == "assistant") {
      out.Text(m.content).Markup("</s>");
    }
  }
  return out.Take();
}

// Gemma 3: <bos> then <start_of_turn>{role}\n{content|trim}<end_of_turn>\n
// with "assistant" written "model"; a system message has no turn of its own:
// its text and a blank line open the first turn's content (untrimmed).
std::vector<PromptPiece> RenderGemma(std::span<const ChatMessage> msgs, bool gen) {
  Pieces out;
  out.Markup("<bos>");
  const std::optional<std::string_view> system = TakeSystem(msgs);
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    out.Markup("<start_of_turn>").Text(m.role == "assistant" ? "model" : m.role).Markup("\n");
    if (i == 0 && system) out.Text(*system).Markup("\n\n");
    out.Add(Strip(Plain(m.content))).Markup("<end_of_turn>\n");
  }
  if (gen) out.Markup("<start_of_turn>model\n");
  return out.Take();
}

// google/gemma-3-*-it tokenizer_config.json's chat_template.
constexpr std::string_view kGemmaTemplate = R"jinja({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)jinja";

}  // namespace

std::string_view GemmaChatTemplate() { return kGemmaTemplate; }

ChatFormat DetectChatFormat(std::string_view t, ChatFormat fallback) {
  if (t.find("<|im_start|>") != std::string_view::npos) return ChatFormat::kChatML;
  if (t.find("<start_of_turn>") != std::string_view::npos) return ChatFormat::kGemma;
  if (t.find("<|start_header_id|>") != std::string_view::npos) return ChatFormat::kLlama3;
  if (t.find("[INST]") != std::string_view::npos) {
    return t.find("<<SYS>>") != std::string_view::npos ? ChatFormat::kLlama2 : ChatFormat::kMistral;
  }
  return fallback;
}

std::vector<PromptPiece> ApplyChatTemplatePieces(ChatFormat format,
                                                 std::span<const ChatMessage> messages,
                                                 bool add_generation_prompt,
                                                 std::string_view default_system) {
  switch (format) {
    case ChatFormat::kChatML:
      return RenderChatML(messages, add_generation_prompt, default_system);
    case ChatFormat::kLlama3:
      return RenderLlama3(messages, add_generation_prompt);
    case ChatFormat::kLlama2:
      return RenderLlama2(messages);
    case ChatFormat::kMistral:
      return RenderMistral(messages);
    case ChatFormat::kGemma:
      return RenderGemma(messages, add_generation_prompt);
  }
  return {};
}

std::string ApplyChatTemplate(ChatFormat format, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, std::string_view default_system) {
  return JoinPieces(
      ApplyChatTemplatePieces(format, messages, add_generation_prompt, default_system));
}

}  // namespace braid
