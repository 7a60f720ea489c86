// Pre-tokenizers: split text into the pieces that BPE merges never cross, the
// way each family's regex does (hand-written matchers; see pre_tokenizer.cpp for
// the patterns). Internal to the tokenizer library. Pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace braid {

// A piece of the text: bytes [begin, end).
struct Piece {
  uint32_t begin;
  uint32_t end;
};

// Appends the pieces of `text` to `pieces`. kSentencePiece returns the whole
// text as one piece. `scratch` is reused between calls to avoid allocation.
void PreTokenize(PreTokenizer kind, std::string_view text, std::vector<unicode::Char>& scratch,
                 std::vector<Piece>& pieces);

}  // namespace braid
