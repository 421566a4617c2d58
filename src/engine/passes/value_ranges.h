// Bounds on the values of integer and bool tensors known while building, for passes that ask
// whether a tensor computed at run time is decided anyway: transformers build masks from
// positions (`arange(L)[:, None] >= 0`, all true) whose shapes are dynamic, so they cannot fold
// to constants, yet say nothing.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "engine/network.h"
#include "engine/passes/network_index.h"

namespace kiln::engine {

// Inclusive bounds (±infinity where unbounded); bools are 0 and 1.
struct ValueRange {
  double lo, hi;
};

// What is known of the values of `id` (an integer or bool tensor) from the layers that compute
// it: constants' and known shape tensors' values, ranges (arange) and fills, views, gathers and
// selects of known tensors, casts between integer types, sums, differences, products, minima,
// maxima and floor divisions by positive constants, comparisons and logic. Constants of the
// weights in `keep` (a refittable plan's) are not read. nullopt: nothing.
std::optional<ValueRange> value_range(const Network& net, const NetworkIndex& index, TensorId id,
                                      const std::set<std::string>& keep = {});

// Whether every element of `id`, a bool tensor, is true whatever the inputs.
bool always_true(const Network& net, const NetworkIndex& index, TensorId id,
                 const std::set<std::string>& keep = {});

}  // namespace kiln::engine
