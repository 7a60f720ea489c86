// The one concrete Tokenizer: BPE over either bytes (GPT-2 byte-level, with a
// regex pre-tokenizer) or characters (SentencePiece style: '▁' for spaces,
// byte-fallback tokens <0xXX>). The loaders (tokenizer_gguf.cpp,
// tokenizer_json.cpp) fill a VocabSpec; BpeTokenizer::Build validates it and
// builds the lookup tables. Internal to the tokenizer library.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"

namespace braid {

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenKind : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// How a SentencePiece-style tokenizer adds the leading '▁'.
enum class SpacePrefix {
  kNone,
  kAlways,          // every text segment, unconditionally (llama.cpp, HF Prepend normalizer)
  kIfMissing,       // every segment not already starting with a space (Metaspace "always")
  kFirstIfMissing,  // only the segment at the start of the text (Metaspace "first")
};

struct VocabSpec {
  std::string name;  // file name, prefixes every error
  PreTokenizer pre = PreTokenizer::kGpt2;
  bool byte_level = true;                                   // false: SentencePiece style
  std::vector<std::string> tokens;                          // id -> text as stored
  std::vector<TokenKind> kinds;                             // id -> kind
  std::vector<float> scores;                                // id -> score (merges_by_score only)
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::string merges_field = "merges";                      // how errors name the merges
  bool merges_by_score = false;  // SentencePiece BPE by token score (GGUF "llama")
  // merges_by_score: of two pairs spelling the same token, the one with the
  // longer left part merges first (HF's ranks; Gemma), not the leftmost.
  bool longer_left_first = false;
  bool ignore_merges = false;  // a piece that is a whole token is not merged (llama3)
  bool byte_fallback = false;
  SpacePrefix space_prefix = SpacePrefix::kNone;
  bool metaspace_split = false;  // split pieces before each '▁'
  int32_t bos = -1, eos = -1, unk = -1;
  // Byte-level: a byte with no token becomes `unk` (tokenizer.json with a
  // model.unk_token, as HF's BPE) instead of being dropped (HF's BPE without
  // one; the GGUF reference). Never when `unk` ends generation.
  bool unk_for_missing_bytes = false;
  bool add_bos = false;
  std::string chat_template;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Validates `spec` (errors name spec.name and the field) and builds the tables.
  static Result<std::unique_ptr<Tokenizer>> Build(VocabSpec spec);

  std::vector<int32_t> Encode(std::string_view text, bool parse_special = true,
                              bool add_bos = false) const override;
  std::vector<int32_t> Encode(std::span<const PromptPiece> pieces,
                              bool add_bos = false) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const override;
  std::string TokenBytes(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;
  // Adds an end-of-generation id (ignored when out of range or present).
  void AddEog(int32_t id);

 private:
  BpeTokenizer() = default;
  Status Init(VocabSpec spec);
  // Encodes `text` split into plain and special-token segments.
  // bos_if_missing: add_bos adds nothing when the first segment is bos
  // already (a chat template's own {{ bos_token }}).
  std::vector<int32_t> EncodeSegments(std::string_view text,
                                      std::span<const SpecialTokenMatcher::Segment> segments,
                                      bool add_bos, bool bos_if_missing = false) const;
  // Splits the plain segments of `segments` further at user-defined tokens.
  void SplitUserDefined(std::string_view text,
                        std::vector<SpecialTokenMatcher::Segment>& segments) const;
  // The id standing in for a byte or text with no token, or -1 to drop it.
  int32_t UnknownFor(bool byte_level) const;
  void EncodeByteLevel(std::string_view text, std::vector<int32_t>& out) const;
  void EncodeSentencePiece(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void EncodeSpmByMerges(std::string_view normalized, std::vector<int32_t>& out) const;
  void EncodeSpmByScore(std::string_view normalized, std::vector<int32_t>& out) const;
  void AppendBytesOrUnknown(std::string_view bytes, std::vector<int32_t>& out) const;
  int32_t Lookup(std::string_view text) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using TextMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  std::string name_;
  bool byte_level_ = true;
  bool merges_by_score_ = false;
  bool ignore_merges_ = false;
  bool longer_left_first_ = false;
  bool byte_fallback_ = false;
  SpacePrefix space_prefix_ = SpacePrefix::kNone;
  bool metaspace_split_ = false;
  int32_t unk_id_ = -1;
  bool unk_for_missing_bytes_ = false;
  std::vector<std::string> bytes_;  // id -> the bytes it decodes to
  std::vector<TokenKind> kinds_;
  std::vector<float> scores_;
  TextMap text_to_id_;                     // stored text -> id (first id wins)
  TextMap bytes_to_id_;                    // byte-level: decoded bytes of normal tokens -> id
  std::array<int32_t, 256> byte_token_{};  // byte -> its single-byte token, or -1
  MergeTable merges_;
  // Control and unknown tokens: their text becomes their id only where
  // special tokens are parsed (parse_special, allow_special pieces).
  SpecialTokenMatcher control_;
  // User-defined tokens (HF's non-special added tokens: Gemma's newline, tab
  // and space runs, HTML tags): ordinary text, matched whole everywhere,
  // before BPE, as HF tokenizers and llama.cpp do.
  SpecialTokenMatcher user_;
};

// GPT-2's bytes_to_unicode: the code point that stands for byte b in
// byte-level vocabularies, and the inverse (-1 for code points that stand for
// no byte).
uint32_t ByteToCodepoint(uint8_t b);
// `s` with every `from` replaced by `to`.
std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to);
// U+2581 '▁', SentencePiece's stand-in for a space.
inline constexpr std::string_view kSpaceMark = "\xE2\x96\x81";
int CodepointToByte(uint32_t cp);

}  // namespace braid
