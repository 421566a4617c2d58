// Batch norms with constant statistics as a per-channel scale and shift (scale_shift.cpp).
#pragma once

#include "engine/network.h"

namespace kiln::engine {

// Every batch-norm layer whose mean, variance and affine parameters are f32 constants becomes
// y = x * a + b, with per-channel constants a = weight / sqrt(var + eps) and
// b = bias - mean * a computed here in double. Two elementwise layers instead of a normalization
// layer: they fuse with their neighbours (the activation after) and follow any layout, where the
// normalization is a pass of its own that the layout pass cannot move. Returns how many.
// Refittable plans keep their batch norms (their weights stay as named).
int batch_norm_to_scale_shift(Network& net);

}  // namespace kiln::engine
