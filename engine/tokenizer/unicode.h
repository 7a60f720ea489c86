// UTF-8 decoding and the character classes the pre-tokenizer regexes use
// (\p{L}, \p{N}, \s). Internal to the tokenizer library. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace braid::unicode {

enum Flag : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

struct CodepointRange {
  uint32_t first;
  uint32_t last;
  uint8_t flags;
};
extern const CodepointRange kCodepointRanges[];
extern const int kNumCodepointRanges;

// Letter/number/space flags of a code point (0 for everything else, including
// values that are not code points).
uint8_t Flags(uint32_t cp);

// A decoded character: its code point (or, for a byte that does not start a
// valid UTF-8 sequence, 0x110000 + byte, which has no flags), where its bytes
// start in the text, and its flags.
struct Char {
  uint32_t cp;
  uint32_t offset;
  uint8_t flags;
};

// Decodes `text` leniently: every byte belongs to exactly one Char; invalid or
// truncated sequences become one Char per byte. Appends to `out`.
void Decode(std::string_view text, std::vector<Char>& out);

// Length of the valid UTF-8 sequence at the start of `s` (1..4), 0 if the
// sequence is invalid, or -1 if `s` ends before a possibly valid sequence does.
int ValidSequenceLength(std::string_view s);

// Appends the UTF-8 encoding of `cp` (which must be <= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string& out);

}  // namespace braid::unicode
