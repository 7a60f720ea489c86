// Reader of the BRLG reference-logits fixtures written by
// scripts/reference/make_logits_fixtures.py (format in scripts/reference/README.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/status.h"

namespace braid {

struct LogitsRecord {
  std::vector<int32_t> ids;  // prompt
  int k = 0;
  std::vector<int32_t> top_ids;    // [n, k], descending logit
  std::vector<float> top_logits;   // [n, k]
  std::vector<float> last_logits;  // [n_vocab] at the last prompt position
  std::vector<int32_t> gen;        // greedy continuation
  std::vector<float> gen_gaps;     // reference top-1 minus top-2 at each generated step
};

Result<std::vector<LogitsRecord>> ReadLogitsFixture(const std::string& path);

}  // namespace braid
