// BpeTokenizer: building the tables from a VocabSpec, encoding and decoding.
#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace braid {
namespace {

// Code points of GPT-2's bytes_to_unicode, indexed by byte: printable
// Latin-1 bytes stand for themselves, the other 68 take 256, 257, ... in order.
const std::array<uint32_t, 256>& ByteTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

// "<0x41>" -> 0x41; -1 if `text` is not a byte token.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = text[i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return -1;
    v = v * 16 + d;
  }
  return v;
}

// Byte-level: the bytes a stored token text stands for, or nullopt-like
// `false` when a character is outside the byte alphabet.
bool UnmapByteLevel(std::string_view text, std::string& out) {
  std::vector<unicode::Char> chars;
  unicode::Decode(text, chars);
  out.clear();
  for (const auto& c : chars) {
    const int b = CodepointToByte(c.cp);
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

const char* const kEogNames[] = {"<|endoftext|>",   "<|im_end|>", "<|eot_id|>",   "<|eom_id|>",
                                 "<|end_of_text|>", "</s>",       "<end_of_turn>"};

}  // namespace

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (true) {
    const size_t j = s.find(from, i);
    if (j == std::string_view::npos) break;
    out.append(s.substr(i, j - i));
    out.append(to);
    i = j + from.size();
  }
  out.append(s.substr(i));
  return out;
}

uint32_t ByteToCodepoint(uint8_t b) { return ByteTable()[b]; }

int CodepointToByte(uint32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[ByteTable()[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

Result<std::unique_ptr<Tokenizer>> BpeTokenizer::Build(VocabSpec spec) {
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer());
  BRAID_RETURN_IF_ERROR(tok->Init(std::move(spec)));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

Status BpeTokenizer::Init(VocabSpec spec) {
  name_ = spec.name;
  const std::string& nm = name_;
  const size_t n = spec.tokens.size();
  if (n == 0) return Status::InvalidArgument(nm + ": the vocabulary is empty");
  if (n > (1u << 24))
    return Status::InvalidArgument(nm + ": vocabulary too large (" + std::to_string(n) +
                                   " tokens)");
  if (spec.kinds.size() != n) {
    return Status::InvalidArgument(nm + ": " + std::to_string(spec.kinds.size()) +
                                   " token types for " + std::to_string(n) + " tokens");
  }
  if (spec.merges_by_score && spec.scores.size() != n) {
    return Status::InvalidArgument(nm + ": " + std::to_string(spec.scores.size()) + " scores for " +
                                   std::to_string(n) + " tokens");
  }
  const auto check_id = [&](int32_t id, const char* what) -> Status {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return Status::InvalidArgument(nm + ": " + what + " id " + std::to_string(id) +
                                     " is out of range (n_vocab " + std::to_string(n) + ")");
    }
    return Status::Ok();
  };
  BRAID_RETURN_IF_ERROR(check_id(spec.bos, "bos"));
  BRAID_RETURN_IF_ERROR(check_id(spec.eos, "eos"));
  BRAID_RETURN_IF_ERROR(check_id(spec.unk, "unknown"));

  n_vocab_ = static_cast<int>(n);
  bos_id_ = spec.bos;
  eos_id_ = spec.eos;
  unk_id_ = spec.unk;
  unk_for_missing_bytes_ = spec.unk_for_missing_bytes;
  add_bos_ = spec.add_bos && spec.bos >= 0;
  pre_ = spec.byte_level ? spec.pre : PreTokenizer::kSentencePiece;
  chat_template_ = std::move(spec.chat_template);
  byte_level_ = spec.byte_level;
  merges_by_score_ = spec.merges_by_score;
  ignore_merges_ = spec.ignore_merges;
  longer_left_first_ = spec.longer_left_first;
  byte_fallback_ = spec.byte_fallback;
  space_prefix_ = spec.space_prefix;
  metaspace_split_ = spec.metaspace_split;
  kinds_ = std::move(spec.kinds);
  scores_ = std::move(spec.scores);
  byte_token_.fill(-1);

  // Token texts, the bytes each one decodes to, and the single-byte tokens.
  bytes_.resize(n);
  text_to_id_.reserve(n);
  std::string unmapped;
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = spec.tokens[i];
    const auto id = static_cast<int32_t>(i);
    text_to_id_.emplace(text, id);
    const TokenKind kind = kinds_[i];
    const bool raw = kind == TokenKind::kControl || kind == TokenKind::kUserDefined;
    if (byte_level_) {
      if (!raw && UnmapByteLevel(text, unmapped)) {
        bytes_[i] = unmapped;
        if (kind == TokenKind::kNormal) bytes_to_id_.emplace(unmapped, id);
        if (unmapped.size() == 1 && byte_token_[static_cast<uint8_t>(unmapped[0])] < 0) {
          byte_token_[static_cast<uint8_t>(unmapped[0])] = id;
        }
      } else {
        bytes_[i] = text;
      }
    } else {
      const int b = raw ? -1 : ParseByteToken(text);
      if (b >= 0 && (kind == TokenKind::kByte || byte_fallback_)) {
        kinds_[i] = TokenKind::kByte;
        bytes_[i] = std::string(1, static_cast<char>(b));
        if (byte_token_[b] < 0) byte_token_[b] = id;
      } else {
        bytes_[i] = raw ? text : ReplaceAll(text, kSpaceMark, " ");
      }
    }
  }

  // Merges: both halves and their concatenation must be tokens.
  merges_.Reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    const std::string where = nm + ": " + spec.merges_field + "[" + std::to_string(r) + "]";
    const int32_t ia = Lookup(a), ib = Lookup(b);
    if (ia < 0) return Status::InvalidArgument(where + ": unknown token '" + a + "'");
    if (ib < 0) return Status::InvalidArgument(where + ": unknown token '" + b + "'");
    const int32_t im = Lookup(a + b);
    if (im < 0)
      return Status::InvalidArgument(where + ": merged token '" + a + b +
                                     "' is not in the vocabulary");
    // A merge that spells a control token's text (some trained vocabularies
    // have "<" + "s>" -> "<s>") would let plain text produce that control
    // token; HF tokenizers keeps such merges, but text from inputs must never
    // yield special ids, so they are left out.
    if (kinds_[im] == TokenKind::kControl) continue;
    merges_.Add(ia, ib, {static_cast<int32_t>(r), im});
  }

  // Special and user-defined tokens, matched in the text before anything else.
  for (size_t i = 0; i < n; ++i) {
    const TokenKind k = kinds_[i];
    if (k == TokenKind::kControl || k == TokenKind::kUnknown) {
      control_.Add(spec.tokens[i], static_cast<int32_t>(i));
    } else if (k == TokenKind::kUserDefined) {
      user_.Add(spec.tokens[i], static_cast<int32_t>(i));
    }
  }

  // End-of-generation ids: eos and the usual end-of-turn tokens. A
  // user-defined token is text (Gemma's "</s>" closes HTML strikethrough).
  if (eos_id_ >= 0) eog_ids_.push_back(eos_id_);
  for (const char* name : kEogNames) {
    const int32_t id = Lookup(name);
    if (id >= 0 && kinds_[id] != TokenKind::kNormal && kinds_[id] != TokenKind::kUserDefined &&
        std::find(eog_ids_.begin(), eog_ids_.end(), id) == eog_ids_.end()) {
      eog_ids_.push_back(id);
    }
  }
  std::sort(eog_ids_.begin(), eog_ids_.end());
  return Status::Ok();
}

int32_t BpeTokenizer::Lookup(std::string_view text) const {
  auto it = text_to_id_.find(text);
  return it == text_to_id_.end() ? -1 : it->second;
}

int32_t BpeTokenizer::UnknownFor(bool byte_level) const {
  // An input must never end the text early: an unknown token that also ends
  // generation (SmolLM2's is <|endoftext|>) is never emitted for input text.
  if (unk_id_ < 0 || IsEog(unk_id_)) return -1;
  return !byte_level || unk_for_missing_bytes_ ? unk_id_ : -1;
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text, bool parse_special,
                                          bool add_bos) const {
  std::vector<SpecialTokenMatcher::Segment> segments;
  if (parse_special && !control_.empty()) {
    control_.Split(text, segments);
  } else if (!text.empty()) {
    segments.push_back({0, static_cast<uint32_t>(text.size()), -1});
  }
  SplitUserDefined(text, segments);
  return EncodeSegments(text, segments, add_bos);
}

void BpeTokenizer::SplitUserDefined(std::string_view text,
                                    std::vector<SpecialTokenMatcher::Segment>& segments) const {
  if (user_.empty()) return;
  std::vector<SpecialTokenMatcher::Segment> out, found;
  out.reserve(segments.size());
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(seg);
      continue;
    }
    found.clear();
    user_.Split(text.substr(seg.begin, seg.end - seg.begin), found);
    for (const auto& f : found) out.push_back({f.begin + seg.begin, f.end + seg.begin, f.id});
  }
  segments = std::move(out);
}

std::vector<int32_t> BpeTokenizer::Encode(std::span<const PromptPiece> pieces, bool add_bos) const {
  std::string text;
  for (const PromptPiece& p : pieces) text += p.text;
  std::vector<SpecialTokenMatcher::Segment> segments, found;
  // Adjacent plain segments are joined, so that BPE runs across the pieces'
  // boundaries exactly as over the whole text.
  const auto push = [&segments](SpecialTokenMatcher::Segment seg) {
    if (seg.id < 0 && !segments.empty() && segments.back().id < 0 &&
        segments.back().end == seg.begin) {
      segments.back().end = seg.end;
    } else {
      segments.push_back(seg);
    }
  };
  uint32_t pos = 0;
  for (size_t i = 0; i < pieces.size();) {
    // A run of pieces that allow special tokens or not: special-token text
    // may span pieces of one run (as it would in the joined text), never a
    // boundary between runs.
    const bool special = pieces[i].allow_special && !control_.empty();
    uint32_t end = pos;
    for (; i < pieces.size() && (pieces[i].allow_special && !control_.empty()) == special; ++i) {
      end += static_cast<uint32_t>(pieces[i].text.size());
    }
    if (end == pos) continue;
    if (special) {
      found.clear();
      control_.Split(std::string_view(text).substr(pos, end - pos), found);
      for (const auto& seg : found) push({seg.begin + pos, seg.end + pos, seg.id});
    } else {
      push({pos, end, -1});
    }
    pos = end;
  }
  // User-defined tokens are text: matched in the joined plain text, across
  // piece boundaries, as in the whole string.
  SplitUserDefined(text, segments);
  return EncodeSegments(text, segments, add_bos, /*bos_if_missing=*/true);
}

std::vector<int32_t> BpeTokenizer::EncodeSegments(
    std::string_view text, std::span<const SpecialTokenMatcher::Segment> segments, bool add_bos,
    bool bos_if_missing) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  const bool has_bos = bos_id_ >= 0 && !segments.empty() && segments.front().id == bos_id_;
  if (add_bos && bos_id_ >= 0 && !(bos_if_missing && has_bos)) out.push_back(bos_id_);
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    const std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
    if (byte_level_) {
      EncodeByteLevel(part, out);
    } else {
      EncodeSentencePiece(part, seg.begin == 0, out);
    }
  }
  return out;
}

void BpeTokenizer::EncodeByteLevel(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<unicode::Char> chars;
  std::vector<Piece> pieces;
  PreTokenize(pre_, text, chars, pieces);
  std::vector<int32_t> symbols;
  const int32_t unknown = UnknownFor(/*byte_level=*/true);
  for (const Piece& p : pieces) {
    const std::string_view piece = text.substr(p.begin, p.end - p.begin);
    if (ignore_merges_) {
      auto it = bytes_to_id_.find(piece);
      if (it != bytes_to_id_.end()) {
        out.push_back(it->second);
        continue;
      }
    }
    symbols.clear();
    for (char ch : piece) {
      // A byte with no token (SmolLM2 has none for 0x04, 0x06, 0x13, 0x14,
      // 0x16, 0x1d) is dropped and its neighbours may merge across the gap,
      // as HF tokenizers' BPE does without an unknown token.
      int32_t id = byte_token_[static_cast<uint8_t>(ch)];
      if (id < 0) id = unknown;
      if (id >= 0) symbols.push_back(id);
    }
    ApplyMerges(merges_, symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
  }
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab_) continue;
    if (skip_special && kinds_[id] == TokenKind::kControl) continue;
    out += bytes_[id];
  }
  // SentencePiece drops the space it added in front of the text.
  if (!byte_level_ && space_prefix_ != SpacePrefix::kNone && !out.empty() && out[0] == ' ')
    out.erase(0, 1);
  return out;
}

std::string BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= n_vocab_) return {};
  return bytes_[id];
}

void BpeTokenizer::AddEog(int32_t id) {
  if (id < 0 || id >= n_vocab_ || IsEog(id)) return;
  eog_ids_.push_back(id);
  std::sort(eog_ids_.begin(), eog_ids_.end());
}

bool BpeTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < n_vocab_ && kinds_[id] == TokenKind::kControl;
}

}  // namespace braid
