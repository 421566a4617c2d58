// Partitioning strategies beyond the default dependency-aware one.
#pragma once

#include <torch/script.h>

#include <vector>

#include "partitioning/segmentation.h"

namespace kiln::partitioning {

// Seed 002's global strategy: greedily contracts the segment dependency graph, merging any two
// segments of one target (adjacent or not) when no path through a third segment joins them, so
// the result stays acyclic; then orders the segments topologically. Barrier segments (control
// flow, impure nodes) keep their place. Gives at most as many segments as `segments`.
// Quadratic in the number of segments per merge: past kMaxGlobalSegments it only merges
// neighbours.
inline constexpr size_t kMaxGlobalSegments = 512;
std::vector<Segment> merge_global(std::vector<Segment> segments, const torch::jit::Block* block,
                                  const NodeOrder& order);

}  // namespace kiln::partitioning
