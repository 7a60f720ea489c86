// Tokenizers of the Llama family: byte-level BPE with the gpt2, llama3, smollm
// and qwen2 pre-tokenizers, and SentencePiece-style BPE (Llama 2, Gemma),
// loaded from GGUF metadata or a Hugging Face tokenizer.json. Thread-safe after
// loading (all methods are const).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat.h"
#include "engine/prompt.h"
#include "engine/status.h"

namespace braid {

class GgufFile;

enum class PreTokenizer { kGpt2, kLlama3, kSmollm, kQwen2, kSentencePiece };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // From the tokenizer.ggml.* keys of a GGUF file.
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  // From a tokenizer.json file; a tokenizer_config.json beside it, if present,
  // supplies the chat template and bos/eos names.
  static Result<std::unique_ptr<Tokenizer>> FromJsonFile(const std::string& path);
  // From tokenizer.json text already in memory (`name` is used in errors).
  static Result<std::unique_ptr<Tokenizer>> FromJsonText(std::string_view json,
                                                         const std::string& name);

  // Text -> ids. With parse_special, the text of control tokens (e.g.
  // "<|im_start|>") becomes their ids; otherwise it is ordinary text.
  // User-defined tokens (HF's non-special added tokens, such as Gemma's "\n\n"
  // or "<b>") are text and matched whole either way.
  // add_bos prepends bos_id() when the model has one.
  virtual std::vector<int32_t> Encode(std::string_view text, bool parse_special = true,
                                      bool add_bos = false) const = 0;
  // Pieces -> ids: the ids of the pieces' concatenated text, BPE running
  // across piece boundaries, except that the text of special tokens becomes
  // their ids only where it lies wholly inside a run of allow_special pieces
  // (engine/prompt.h). All pieces allow_special: Encode(joined, true); none:
  // Encode(joined, false). add_bos adds no second bos when the pieces begin
  // with it (a chat template's own {{ bos_token }}, as Gemma's and Llama 3's).
  virtual std::vector<int32_t> Encode(std::span<const PromptPiece> pieces,
                                      bool add_bos = false) const = 0;
  // Ids -> bytes (may end inside a UTF-8 sequence; see StreamDecoder).
  // Special tokens are rendered as their text unless skip_special.
  virtual std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;
  // The bytes one token stands for (the empty string for an out-of-range id).
  virtual std::string TokenBytes(int32_t id) const = 0;
  // Whether `id` is a control token (bos, eos, <|im_start|>, ...): the tokens
  // Decode and StreamDecoder leave out when asked to skip special tokens.
  virtual bool IsSpecial(int32_t id) const = 0;

  int n_vocab() const { return n_vocab_; }
  int32_t bos_id() const { return bos_id_; }  // -1 when none
  int32_t eos_id() const { return eos_id_; }  // -1 when none
  bool add_bos_by_default() const { return add_bos_; }
  // End-of-generation ids (eos, eot, <|im_end|>, <|eot_id|>, ...).
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  bool IsEog(int32_t id) const;
  PreTokenizer pre_tokenizer() const { return pre_; }
  // The Jinja chat template stored with the model ("" when none; Gemma 3's,
  // GemmaChatTemplate(), for a Gemma GGUF that stores none).
  const std::string& chat_template() const { return chat_template_; }

 protected:
  int n_vocab_ = 0;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = false;
  std::vector<int32_t> eog_ids_;
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  std::string chat_template_;
};

// Turns a stream of token ids into text that never ends inside a UTF-8
// sequence: bytes of an incomplete character are held back until the rest
// arrives (or Flush, which emits them as U+FFFD).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true)
      : tok_(tokenizer), skip_special_(skip_special) {}
  // Returns the newly complete text (possibly empty).
  std::string Push(int32_t id);
  std::string Flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

// ---- chat templates ------------------------------------------------------

enum class ChatFormat { kChatML, kLlama3, kLlama2, kMistral, kGemma };

// Recognises the family of a Jinja chat template by its markers; `fallback`
// when the template is empty or unknown.
ChatFormat DetectChatFormat(std::string_view jinja_template, ChatFormat fallback);
// Renders messages in the family's format; with add_generation_prompt the
// assistant's turn is opened. `default_system` is inserted when the first
// message is not a system message and the family does so (SmolLM2's template).
// The template's markup comes as allow_special pieces, roles and contents
// (default_system included) as plain pieces, so that a message cannot forge a
// turn; their text joined is ApplyChatTemplate's.
std::vector<PromptPiece> ApplyChatTemplatePieces(ChatFormat format,
                                                 std::span<const ChatMessage> messages,
                                                 bool add_generation_prompt,
                                                 std::string_view default_system = "");
// The same, as one string (for display and tests).
std::string ApplyChatTemplate(ChatFormat format, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, std::string_view default_system = "");
// Gemma 3's Jinja chat template as google/gemma-3-*-it ship it: <bos>, turns
// <start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n, the system
// message put in front of the first user turn. Gemma GGUFs often carry none.
std::string_view GemmaChatTemplate();

}  // namespace braid
