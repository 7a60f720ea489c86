// The scheduler's view of one request: its tokens, how many of them have KV
// computed, and the blocks that hold that KV. vLLM v1's rule: a request only
// tracks num_computed against its token count; prefill, chunked prefill,
// decode and recompute after preemption all follow from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "kv/block_pool.h"
#include "kv/radix_cache.h"

namespace braid {

using RequestId = uint64_t;

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct SeqState {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int prompt_len = 0;
  int max_tokens = 0;               // generation cap
  int logprobs_from = -1;           // prompt tokens from here on get log-probabilities (-1: none)
  int num_computed = 0;             // tokens whose KV is in `blocks`
  std::vector<kv::BlockId> blocks;  // block table; this sequence holds one reference on each
  kv::LockId lock = 0;              // lock on the cached prefix it started from
  int cached_tokens = 0;            // prompt tokens that came from the cache at (first) admission
  int host_tokens = 0;              // of the rest, those copied back from the lower KV tier
  int inserted_blocks = 0;          // leading blocks already offered to the cache
  int locked_blocks = 0;            // of those, the ones the cache lent it (locked) at admission
  // Leading blocks it let go because no later query reads them
  // (SchedulerConfig::window); their entries are kv::kNoBlock.
  int dropped_blocks = 0;
  // With slides (SchedulerConfig::slide_window): leading blocks whose slide
  // it does not hold; it holds the slides of the rest.
  int slides_from = 0;
  // With slides: per entry of `blocks`, the slide its block had when the
  // sequence took it (the slide table forward passes read; entries before
  // slides_from may have been taken back since, and are not read).
  std::vector<int32_t> slides;
  // Prompt positions up to which its client has been charged
  // (AdmissionPolicy::OnService; cached positions count, at their own price).
  int charged = 0;

  GoalClass goal = GoalClass::kThroughput;
  int priority = 0;
  double arrival = 0;              // seconds, engine clock
  std::optional<double> deadline;  // absolute, engine clock
  uint64_t salt = 0;
  std::string client;
  std::string program;  // GenerationRequest::program
  SeqStatus status = SeqStatus::kWaiting;
  int preemptions = 0;

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
};

}  // namespace braid
