// SentencePiece-style encoding: '▁' for spaces with a space prefix, then BPE
// over characters, either by ranked merges (HF tokenizers' BPE model, for
// tokenizer.json) or by token scores (sentencepiece / llama.cpp, for GGUF), with
// byte-fallback tokens <0xXX> for what no token covers.
#include <queue>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/unicode.h"

namespace braid {

void BpeTokenizer::EncodeSentencePiece(std::string_view text, bool at_start,
                                       std::vector<int32_t>& out) const {
  std::string normalized;
  const bool starts_with_space = !text.empty() && text[0] == ' ';
  bool prefix = false;
  switch (space_prefix_) {
    case SpacePrefix::kNone:
      break;
    case SpacePrefix::kAlways:
      prefix = true;
      break;
    case SpacePrefix::kIfMissing:
      prefix = !starts_with_space;
      break;
    case SpacePrefix::kFirstIfMissing:
      prefix = at_start && !starts_with_space;
      break;
  }
  if (prefix) normalized = kSpaceMark;
  normalized += ReplaceAll(text, " ", kSpaceMark);
  if (merges_by_score_) {
    EncodeSpmByScore(normalized, out);
    return;
  }
  if (!metaspace_split_) {
    EncodeSpmByMerges(normalized, out);
    return;
  }
  // Metaspace split: a new piece starts at every '▁'.
  size_t start = 0;
  while (start < normalized.size()) {
    size_t next = normalized.find(kSpaceMark, start + 1);
    if (next == std::string::npos) next = normalized.size();
    EncodeSpmByMerges(std::string_view(normalized).substr(start, next - start), out);
    start = next;
  }
}

// Unknown text: its byte tokens when every byte has one, else the unknown token.
void BpeTokenizer::AppendBytesOrUnknown(std::string_view bytes, std::vector<int32_t>& out) const {
  bool all = byte_fallback_ || merges_by_score_;
  for (char ch : bytes) all = all && byte_token_[static_cast<uint8_t>(ch)] >= 0;
  if (all) {
    for (char ch : bytes) out.push_back(byte_token_[static_cast<uint8_t>(ch)]);
  } else if (const int32_t unk = UnknownFor(/*byte_level=*/false); unk >= 0) {
    out.push_back(unk);
  }
}

// HF tokenizers' BPE model: characters (or their byte tokens), then ranked merges.
void BpeTokenizer::EncodeSpmByMerges(std::string_view normalized, std::vector<int32_t>& out) const {
  std::vector<unicode::Char> chars;
  unicode::Decode(normalized, chars);
  std::vector<int32_t> symbols;
  symbols.reserve(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) {
    const size_t end = i + 1 < chars.size() ? chars[i + 1].offset : normalized.size();
    const std::string_view ch = normalized.substr(chars[i].offset, end - chars[i].offset);
    const int32_t id = Lookup(ch);
    if (id >= 0) {
      symbols.push_back(id);
    } else {
      AppendBytesOrUnknown(ch, symbols);
    }
  }
  ApplyMerges(merges_, symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

// llama.cpp's llm_tokenizer_spm: repeatedly merge the adjacent pair whose
// concatenation is the token with the highest score (leftmost on ties); the
// remaining symbols that are not tokens become byte tokens.
//
// With longer_left_first_ (Gemma, whose scores are -id: HF's merge ranks), two
// pairs spelling the same token rank as transformers' generate_merges orders
// that token's merges: the longer left part first, then leftmost. (Both
// splits are prefixes of one text, so longer in bytes is longer in
// characters, the order generate_merges uses.)
void BpeTokenizer::EncodeSpmByScore(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t prev, next;
    uint32_t start, len;
  };
  struct Bigram {
    int32_t left, right;
    float score;
    uint32_t len;
    uint32_t left_len;
  };
  const bool longer_left_first = longer_left_first_;
  const auto worse = [longer_left_first](const Bigram& a, const Bigram& b) {
    if (a.score != b.score) return a.score < b.score;
    if (longer_left_first && a.left_len != b.left_len) return a.left_len < b.left_len;
    return a.left > b.left;
  };
  std::vector<unicode::Char> chars;
  unicode::Decode(text, chars);
  if (chars.empty()) return;
  std::vector<Symbol> sym(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) {
    const uint32_t end =
        i + 1 < chars.size() ? chars[i + 1].offset : static_cast<uint32_t>(text.size());
    sym[i] = {static_cast<int32_t>(i) - 1, i + 1 < chars.size() ? static_cast<int32_t>(i + 1) : -1,
              chars[i].offset, end - chars[i].offset};
  }
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  const auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = sym[l].len + sym[r].len;
    const int32_t id = Lookup(text.substr(sym[l].start, len));
    if (id < 0 || kinds_[id] == TokenKind::kControl)
      return;  // plain text never spells a control token
    queue.push({l, r, scores_[id], len, sym[l].len});
  };
  for (size_t i = 1; i < sym.size(); ++i)
    try_add(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].start, sym[i].len);
    const int32_t id = Lookup(piece);
    if (id >= 0) {
      out.push_back(id);
    } else {
      AppendBytesOrUnknown(piece, out);
    }
  }
}

}  // namespace braid
