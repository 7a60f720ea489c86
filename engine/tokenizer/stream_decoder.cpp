// StreamDecoder (over a Tokenizer), TextStream (over a Model) and the small
// non-virtual parts of Tokenizer.
#include <algorithm>

#include "engine/model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace braid {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Moves the complete characters at the front of `pending` to the result;
// invalid bytes become U+FFFD; an incomplete sequence at the end stays.
std::string TakeComplete(std::string& pending) {
  std::string out;
  size_t i = 0;
  while (i < pending.size()) {
    const int len = unicode::ValidSequenceLength(std::string_view(pending).substr(i));
    if (len < 0) break;
    if (len == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(pending, i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    }
  }
  pending.erase(0, i);
  return out;
}

// TakeComplete, then U+FFFD for what is left: the start of a sequence that
// never completed.
std::string TakeAll(std::string& pending) {
  std::string out = TakeComplete(pending);
  if (!pending.empty()) out += kReplacement;
  pending.clear();
  return out;
}

}  // namespace

bool Tokenizer::IsEog(int32_t id) const {
  return std::find(eog_ids_.begin(), eog_ids_.end(), id) != eog_ids_.end();
}

std::string StreamDecoder::Push(int32_t id) {
  if (skip_special_ && tok_.IsSpecial(id)) return {};
  pending_ += tok_.TokenBytes(id);
  return TakeComplete(pending_);
}

std::string StreamDecoder::Flush() { return TakeAll(pending_); }

std::string TextStream::Push(int32_t id) {
  if (model_.IsSpecialToken(id)) return {};
  pending_ += model_.TokenBytes(id);
  return TakeComplete(pending_);
}

std::string TextStream::Flush() { return TakeAll(pending_); }

}  // namespace braid
