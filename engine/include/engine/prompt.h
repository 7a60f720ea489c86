// A prompt as pieces of text, each saying whether the text of special tokens
// in it ("<|im_start|>", "<|endoftext|>") may become special token ids.
//
// Only text that the prompt's author wrote (template literals, a chat
// template's own markup) may do so; text from inputs (documents, variable
// values, message contents) is plain, so that it cannot forge a chat turn or
// end the text early. Tokenization concatenates the pieces' text and runs BPE
// across piece boundaries as on the whole string: where no special-token text
// is in plain pieces, the ids are those of the concatenated text.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

struct PromptPiece {
  std::string text;
  bool allow_special = false;  // special-token text in `text` becomes special ids
};

// Text from an input: special-token text stays text.
inline PromptPiece PlainPiece(std::string text) { return {std::move(text), false}; }
// Text the author wrote: special-token text becomes special ids.
inline PromptPiece MarkupPiece(std::string text) { return {std::move(text), true}; }

// The pieces' text, concatenated.
inline std::string JoinPieces(std::span<const PromptPiece> pieces) {
  std::string out;
  for (const PromptPiece& p : pieces) out += p.text;
  return out;
}

// Appends `text` as a piece, joined to the last piece when both allow the
// same (fewer, longer pieces; the ids do not change).
inline void AppendPiece(std::vector<PromptPiece>& pieces, std::string_view text,
                        bool allow_special) {
  if (text.empty()) return;
  if (!pieces.empty() && pieces.back().allow_special == allow_special) {
    pieces.back().text += text;
  } else {
    pieces.push_back({std::string(text), allow_special});
  }
}

}  // namespace braid
