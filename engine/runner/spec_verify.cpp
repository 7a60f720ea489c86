#include "runner/spec_verify.h"

namespace braid {

OutputStops::OutputStops(const SamplingParams& params)
    : stop_tokens_(params.stop_tokens),
      min_tokens_(params.min_tokens),
      max_tokens_(params.max_tokens),
      strings_(params.stop) {}

bool OutputStops::EndsBefore(int32_t id, bool eog) const {
  bool stop_token = eog;
  for (int32_t s : stop_tokens_) stop_token |= s == id;
  return stop_token;
}

OutputStops::End OutputStops::Joined(int n, const std::string* piece, std::string* text) {
  // Stop strings are looked for from the token after min_tokens on.
  if (piece) *text = n <= min_tokens_ ? *piece : strings_.Push(*piece, &string_hit_);
  if (string_hit_) return End::kStopString;
  if (n >= max_tokens_) return End::kLength;
  return End::kNone;
}

std::string OutputStops::Flush(const std::string& piece, std::string* held) {
  held->clear();
  if (string_hit_) return "";
  bool hit = false;
  std::string out = strings_.Push(piece, &hit);
  if (!hit) *held = strings_.Flush();
  return out;
}

}  // namespace braid
