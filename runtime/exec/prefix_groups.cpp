#include "exec/prefix_groups.h"

#include <algorithm>

namespace braid::rt {

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

std::vector<PrefixCluster> ClusterByPrefix(const std::vector<const std::vector<int32_t>*>& prompts,
                                           size_t min_tokens) {
  std::vector<PrefixCluster> out;
  std::vector<bool> taken(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (taken[i]) continue;
    PrefixCluster c;
    c.leader = i;
    c.shared = prompts[i]->size();
    for (size_t j = i + 1; j < prompts.size(); ++j) {
      if (taken[j]) continue;
      const size_t common = CommonPrefix(*prompts[i], *prompts[j]);
      if (common < min_tokens) continue;
      c.followers.push_back(j);
      c.shared = std::min(c.shared, common);
      taken[j] = true;
    }
    if (c.followers.empty()) continue;
    taken[i] = true;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace braid::rt
