// The scores of a call's select outputs in its store record. A StoredCall
// keeps outputs as a name -> value map; the scores ride along under a key
// that no output can have (output names are letters, digits and '_'), as
// JSON: {"mood": [["good", -0.12], ["bad", -2.3]], ...} (choices in order).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "runtime/runtime.h"

namespace braid::rt {

inline constexpr std::string_view kScoresKey = "#scores";

std::string EncodeScores(const std::map<std::string, ChoiceScores>& scores);
// The scores by output name; malformed text gives an empty map (the values
// replay without their scores rather than not at all). A null score (JSON
// has no -inf) reads as -inf.
std::map<std::string, ChoiceScores> DecodeScores(const std::string& text);

}  // namespace braid::rt
