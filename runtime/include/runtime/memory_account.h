// MemoryAccount: where a run's growing memory is drawn from when its owner
// keeps a budget (braid serve: per-client and global caps on what live runs
// hold). The runtime takes the bytes of the values it builds (joins,
// generated outputs); a Lua program's heap and the host copies of its data
// take theirs as they grow. What was taken is given back by the owner when
// the run ends, not by the takers: the account measures a run's peak.
#pragma once

#include <cstddef>

#include "engine/status.h"

namespace braid::rt {

class MemoryAccount {
 public:
  virtual ~MemoryAccount() = default;
  // Takes `bytes` more; ResourceExhausted naming the cap that refused them
  // (nothing is taken then). Any thread.
  virtual Status Take(size_t bytes) = 0;
};

}  // namespace braid::rt
