// Splitting text into chunks for map-style programs (braid.chunks).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace braid::lua {

// Splits `text` into chunks of at most `max_chars` bytes each, cutting at the
// largest boundary that fits: paragraphs (blank lines) first, then sentences
// ('.', '!' or '?' followed by white space), then white space, and only as a
// last resort inside a word (never inside a UTF-8 character). Consecutive
// pieces are packed greedily, so chunks are as full as the boundaries allow.
// Paragraphs packed together keep a blank line between them; leading and
// trailing white space of each chunk is trimmed and empty chunks dropped.
// max_chars < 1 is treated as 1.
std::vector<std::string> SplitChunks(std::string_view text, size_t max_chars);

// The rough size estimate braid.chunks uses for {tokens = N}: about four
// bytes of English text per token.
inline constexpr size_t kCharsPerToken = 4;

}  // namespace braid::lua
