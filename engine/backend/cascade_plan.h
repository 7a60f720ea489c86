// How the CUDA backend finds a step's shared-prefix (cascade) groups and
// cuts their attention into CascadeAttention's thread blocks
// (backend/cuda/cuda_backend.cpp): plain host code, kept apart so that it
// is tested without a GPU.
//
// A group is the decode tokens (single-token segments) whose sequences'
// block tables start with the same blocks, the radix cache's sharing: they
// attend those blocks' positions once for the group.
//
// Each group's query rows (its members' query heads of one KV head) go in
// blocks of `rows_per_block`, and its prefix in `ranges` key ranges; a work
// unit is one (group, row block, range), encoded as
// group << 16 | row block << 4 | range. A step replayed as a CUDA graph of
// `graph_batch` tokens has a grid fixed at capture: its count of ranges and
// of units depend on graph_batch alone, and the units past the step's own
// are idle (-1).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace braid {

struct CascadeMember {
  int seg = 0;  // its segment in the batch
  int dec = 0;  // its index among the decode tokens (segments under gemm_min tokens)
  int row = 0;  // its token's row in the batch
};
struct PrefixGroup {
  int keys = 0;  // the shared positions [0, keys): whole blocks before every member's position
  std::vector<CascadeMember> members;
};
// The groups of `batch`: single-token segments past their first block, by
// their first block, each group's shared blocks the longest run all its
// members' tables start with that lies before every member's position;
// groups of fewer than min_members members or min_keys keys are dropped.
// gemm_min: segments of at least that many tokens are not decode tokens.
std::vector<PrefixGroup> FindPrefixGroups(std::span<const BatchSegment> batch, int block_size,
                                          int gemm_min, int min_members, int min_keys);

struct CascadeLimits {
  int rows_per_block = 64;  // 16 per warp
  int group = 1;            // query heads per KV head
  int n_kv = 1;
  int slots = 1;           // CascadeAttention blocks the device holds at once
  int max_ranges = 16;     // kernels::cuda::kMaxPrefixRanges (fits the unit's 4 bits)
  int min_members = 4;     // a group's least members
  int min_keys = 256;      // a group's least prefix keys
  int range_pairs = 4096;  // (decode token, range) pairs the range buffer holds
  int work_cap = 1 << 16;  // units the work region holds
};

struct CascadeGroupShape {
  int members = 0;  // decode tokens
  int keys = 0;     // prefix positions
};

struct CascadeWorkPlan {
  int ranges = 1;
  std::vector<int32_t> work;
};

// The plan for `groups` (each with at least min_members members and
// min_keys keys) of a step with `n_decode` decode tokens; graph_batch > 0:
// a graphed step of that many tokens (every group's members among them).
// The count of ranges fills the slots once (a second, partly filled wave of
// blocks measured slower), keeps at least 4 tiles of 16 keys per range (a
// graphed step's at least one), and fits the range buffer and the work
// region.
CascadeWorkPlan PlanCascadeWork(std::span<const CascadeGroupShape> groups, int n_decode,
                                int graph_batch, const CascadeLimits& limits);

}  // namespace braid
