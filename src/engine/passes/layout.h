// The builder's layout pass: 2-d and 3-d convolutions the backend runs faster on channels-last data
// ([N, H, W, C], [N, D, H, W, C]) become channels-last layers, with a transpose on each side; the
// transposes are then pushed through the layers between convolutions (elementwise, pooling,
// reductions, concat, slices, chains of shuffles such as a channel shuffle) until they meet and
// cancel, so that a chain of convolutions keeps its data channels-last and transposes only where
// the chain begins and ends. Shuffles that write 4-d (5-d) data channels-first for layers that
// read it channels-last are tried writing it channels-last, and kept so where the built network
// then moves fewer activations. Weight transposes fold into constants, and so do those of values
// computed from constants only (a batch norm's scale cast to f16).
#pragma once

#include <functional>

#include "engine/network.h"

namespace kiln::engine {

struct LayoutReport {
  int convolutions = 0;  // made channels-last
  int layers_moved = 0;  // other layers now computing on channels-last data
  int transposes = 0;    // transposes of activations in the built plan (count_layout_transposes)
};

// Rewrites every convolution for which `wants(net, layer)` holds (only 2-d and 3-d, non-transposed
// ones are considered). Leaves dead transposes behind for the builder's dead-layer removal.
LayoutReport assign_channels_last(Network& net,
                                  const std::function<bool(const Network&, const Layer&)>& wants);

// Layout transposes of non-constant tensors in `net` (after dead-layer removal: what runs).
int count_layout_transposes(const Network& net);

}  // namespace kiln::engine
