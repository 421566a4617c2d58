// Non-tensor dependency analysis: engine segments take and return tensors only.
#pragma once

#include <torch/script.h>

#include <vector>

#include "partitioning/segmentation.h"

namespace kiln::partitioning {

// For every engine segment of `block` (boundaries computed):
// - a non-tensor input (int, list, tuple, ...) is recomputed inside the segment when every node
//   producing it can run in the engine (per `base`, the static decisions) from tensors and
//   constants; those nodes join the segment as copies. Otherwise the segment's nodes that read
//   it fall back to PyTorch with kNonTensorBoundary.
// - then, only when nothing fell back, a non-tensor output used outside the segment makes its
//   producer fall back.
// Returns true when a decision changed (the caller segments again). Leaves boundaries current.
bool resolve_non_tensor_boundaries(std::vector<Segment>& segments, const torch::jit::Block* block,
                                   const Decisions& base, Decisions& decisions,
                                   const NodeOrder& order);

}  // namespace kiln::partitioning
