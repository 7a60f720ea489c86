// Hand-written equivalents of the pre-tokenizer regexes. Each Match* function
// returns where the regex's match starting at character i ends, trying the
// alternatives in order as a backtracking engine (Oniguruma, PCRE) does.
//
// gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// smollm: \p{N} (each digit its own piece) first, then gpt2 on the rest.
// llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//         ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// qwen2:  llama3 with \p{N} instead of \p{N}{1,3}.
#include "tokenizer/pre_tokenizer.h"

namespace braid {
namespace {

using unicode::Char;

bool IsL(const Char& c) { return c.flags & unicode::kLetter; }
bool IsN(const Char& c) { return c.flags & unicode::kNumber; }
bool IsS(const Char& c) { return c.flags & unicode::kSpace; }
bool IsOther(const Char& c) { return c.flags == 0; }  // [^\s\p{L}\p{N}]
bool IsCrLf(const Char& c) { return c.cp == '\r' || c.cp == '\n'; }

// Lower-cases the letters the (?i:'s|...) contractions can meet; U+017F (long
// s) case-folds to 's'.
uint32_t FoldCase(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp == 0x17F) return 's';
  return cp;
}

// 's|'t|'re|'ve|'m|'ll|'d at i; returns the end or 0.
size_t MatchContraction(const Char* c, size_t i, size_t e, bool ignore_case) {
  if (c[i].cp != '\'' || i + 1 >= e) return 0;
  const auto fold = [&](uint32_t cp) { return ignore_case ? FoldCase(cp) : cp; };
  const uint32_t a = fold(c[i + 1].cp);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 >= e) return 0;
  const uint32_t b = fold(c[i + 2].cp);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return 0;
}

// \s+(?!\S)|\s+ at a space character i.
size_t MatchTrailingSpace(const Char* c, size_t i, size_t e) {
  size_t j = i;
  while (j < e && IsS(c[j])) ++j;
  if (j == e) return j;         // the run ends the text: (?!\S) holds
  if (j - 1 > i) return j - 1;  // leave the last space to the next word
  return i + 1;                 // \s+
}

size_t MatchGpt2(const Char* c, size_t i, size_t e) {
  if (size_t m = MatchContraction(c, i, e, false)) return m;
  const size_t s = (c[i].cp == ' ' && i + 1 < e) ? i + 1 : i;  // after " ?"
  size_t k = s;
  if (IsL(c[s])) {
    while (k < e && IsL(c[k])) ++k;
    return k;
  }
  if (IsN(c[s])) {
    while (k < e && IsN(c[k])) ++k;
    return k;
  }
  if (IsOther(c[s])) {
    while (k < e && IsOther(c[k])) ++k;
    return k;
  }
  if (IsS(c[i])) return MatchTrailingSpace(c, i, e);
  return i + 1;
}

size_t MatchLlama3(const Char* c, size_t i, size_t e, size_t max_digits) {
  if (size_t m = MatchContraction(c, i, e, true)) return m;
  const Char& ch = c[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t k = i;
  if (IsL(ch) || (!IsCrLf(ch) && !IsN(ch) && i + 1 < e && IsL(c[i + 1]))) {
    k = i + 1;
    while (k < e && IsL(c[k])) ++k;
    return k;
  }
  // \p{N}{1,3}
  if (IsN(ch)) {
    while (k < e && k - i < max_digits && IsN(c[k])) ++k;
    return k;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  const size_t s = (ch.cp == ' ' && i + 1 < e && IsOther(c[i + 1])) ? i + 1 : i;
  if (IsOther(c[s])) {
    k = s;
    while (k < e && IsOther(c[k])) ++k;
    while (k < e && IsCrLf(c[k])) ++k;
    return k;
  }
  if (IsS(ch)) {
    // \s*[\r\n]+ : up to and including the last line break of the space run.
    size_t j = i, last_break = e;
    for (; j < e && IsS(c[j]); ++j) {
      if (IsCrLf(c[j])) last_break = j;
    }
    if (last_break != e) return last_break + 1;
    return MatchTrailingSpace(c, i, e);
  }
  return i + 1;
}

enum class Pattern { kGpt2, kLlama3, kQwen2 };

void Split(Pattern pattern, const Char* c, size_t b, size_t e, size_t n_chars, uint32_t text_size,
           std::vector<Piece>& pieces) {
  const auto offset = [&](size_t idx) { return idx < n_chars ? c[idx].offset : text_size; };
  size_t i = b;
  while (i < e) {
    size_t j;
    switch (pattern) {
      case Pattern::kGpt2:
        j = MatchGpt2(c, i, e);
        break;
      case Pattern::kLlama3:
        j = MatchLlama3(c, i, e, 3);
        break;
      default:
        j = MatchLlama3(c, i, e, 1);
        break;
    }
    pieces.push_back({offset(i), offset(j)});
    i = j;
  }
}

}  // namespace

void PreTokenize(PreTokenizer kind, std::string_view text, std::vector<Char>& scratch,
                 std::vector<Piece>& pieces) {
  if (text.empty()) return;
  const auto size = static_cast<uint32_t>(text.size());
  if (kind == PreTokenizer::kSentencePiece) {
    pieces.push_back({0, size});
    return;
  }
  scratch.clear();
  unicode::Decode(text, scratch);
  const Char* c = scratch.data();
  const size_t n = scratch.size();
  switch (kind) {
    case PreTokenizer::kGpt2:
      Split(Pattern::kGpt2, c, 0, n, n, size, pieces);
      break;
    case PreTokenizer::kLlama3:
      Split(Pattern::kLlama3, c, 0, n, n, size, pieces);
      break;
    case PreTokenizer::kQwen2:
      Split(Pattern::kQwen2, c, 0, n, n, size, pieces);
      break;
    case PreTokenizer::kSmollm: {
      size_t start = 0;
      for (size_t i = 0; i < n; ++i) {
        if (!IsN(c[i])) continue;
        Split(Pattern::kGpt2, c, start, i, n, size, pieces);
        pieces.push_back({c[i].offset, i + 1 < n ? c[i + 1].offset : size});
        start = i + 1;
      }
      Split(Pattern::kGpt2, c, start, n, n, size, pieces);
      break;
    }
    default:
      pieces.push_back({0, size});
      break;
  }
}

}  // namespace braid
