// Speculative verification and the end of an output, shared by Generate and
// the serving engine.
//
// A pass that checked k guesses yields k + 1 logits rows: row j decides the
// token after the first j guesses. Tokens are drawn row by row while the
// guesses hold, so a pass yields the kept guesses and one more token (the
// correction, or the token after every guess). Each draw is the one a plain
// step would make at that position (the request's own random stream), so the
// output is the same with or without guesses; for a deterministic guess this
// is the rejection rule itself (kept with its probability, else a draw from
// the rest). The output may end at any drawn token (OutputStops): the tokens
// after it are dropped, kept guesses or not.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/sampling.h"
#include "runner/stop_matcher.h"

namespace braid {

// Where an output ends, token by token: at a stop token or the model's end
// of generation (neither joins the output), at a stop string in the decoded
// text (looked for from the token after min_tokens on; the text ends right
// before it), or at max_tokens. One per request; one thread at a time.
class OutputStops {
 public:
  explicit OutputStops(const SamplingParams& params);

  enum class End { kNone, kStopString, kLength };

  // Whether token `id` ends the output without joining it: the model's end
  // of generation (`eog`, which the caller leaves false under ignore_eos) or
  // one of the stop tokens.
  bool EndsBefore(int32_t id, bool eog) const;
  // A token joined the output as its n-th token (n from 1); `piece` is its
  // newly decoded text (null where no text is decoded). *text gets the text
  // now safe to emit. Returns whether the output ends with this token: a
  // stop string completed (the text ends right before it) or n reached
  // max_tokens.
  End Joined(int n, const std::string* piece, std::string* text);

  // The output ended and the decoder's last `piece` is known: returns what
  // of it is safe to emit, and *held what the stop-string matcher still held
  // back (empty when `piece` completed a stop string). Both "" after a stop
  // string ended the output.
  std::string Flush(const std::string& piece, std::string* held);

  // A stop string ended the output.
  bool stopped_by_string() const { return string_hit_; }

 private:
  const std::vector<int32_t> stop_tokens_;
  const int min_tokens_, max_tokens_;
  StopMatcher strings_;
  bool string_hit_ = false;
};

// How one pass's rows went.
struct Verdict {
  int accepted = 0;    // guesses kept
  int32_t last = -1;   // the last token drawn (-1: none)
  bool ended = false;  // the output ended at `last` (take returned true)
  int bad_row = -1;    // the row that could not be drawn from (draw gave -1), else -1
};

// Draws rows 0 .. guesses.size() of a pass (see the file comment).
// draw(j) -> int32_t: the token row j decides, or -1 when it cannot be drawn
// (non-finite logits). take(id) -> bool: adds the token to the output and
// returns true when the output ended with it. Stops at the first token that
// is not the next guess, at the end of the output, or at a bad row.
template <class Draw, class Take>
Verdict VerifyGuesses(std::span<const int32_t> guesses, Draw&& draw, Take&& take) {
  Verdict v;
  for (size_t j = 0; j <= guesses.size(); ++j) {
    const int32_t id = draw(static_cast<int>(j));
    if (id < 0) {
      v.bad_row = static_cast<int>(j);
      return v;
    }
    v.last = id;
    if (take(id)) {
      v.ended = true;
      return v;
    }
    if (j == guesses.size() || id != guesses[j]) return v;
    ++v.accepted;
  }
  return v;
}

}  // namespace braid
