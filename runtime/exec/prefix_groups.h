// Prefix sharing among prompts submitted together: prompts whose leading
// tokens agree for at least `min_tokens` (one KV block) form a cluster with a
// leader (submitted first) and followers (submitted once the leader's prompt
// is in the engine's prefix cache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid::rt {

struct PrefixCluster {
  size_t leader = 0;              // index into the input
  std::vector<size_t> followers;  // indices, in input order
  size_t shared = 0;              // tokens every member shares with the leader
};

// Length of the common leading run of a and b.
size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

// Greedy in input order (the caller sorts by urgency): the first unassigned
// prompt leads, every later unassigned prompt sharing >= min_tokens with it
// follows. Prompts that share with nobody are in no cluster.
std::vector<PrefixCluster> ClusterByPrefix(const std::vector<const std::vector<int32_t>*>& prompts,
                                           size_t min_tokens);

}  // namespace braid::rt
