// The builder's layer fusions (builder.cpp runs them in order): several layers become one whose
// kernel does their work in fewer passes over memory. Each records a line per fusion in
// `fusions` ("conv1 + relu1 -> conv1") and leaves the network valid.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/network.h"

namespace kiln::engine {

bool is_network_output(const Network& net, TensorId id);
// The only consumer of `id`, if it has exactly one and is not a network output (its index in
// `*index`).
const Layer* single_consumer(const Network& net, TensorId id, size_t* index);

// Convolution/matmul followed by activation, residual add, activation: one layer with post-ops.
void fuse_post_ops(Network& net, std::vector<std::string>& fusions);

// Squeeze-excitation in torch's form becomes one SqueezeExcitation layer where
// applies(channels, squeeze width, channels_last) says the backend takes it. Returns how many.
int fuse_squeeze_excitation(Network& net,
                            const std::function<bool(int64_t, int64_t, bool)>& applies,
                            std::vector<std::string>& fusions);

// A squeeze-excitation layer takes the 1x1 convolution after it where applies(samples, pixels,
// channels, out channels) says it pays (SqueezeExcitationParams::project). Returns how many.
int fold_excitation_into_projection(
    Network& net, const std::function<bool(int64_t, int64_t, int64_t, int64_t)>& applies,
    std::vector<std::string>& fusions);

// A float cast whose result only feeds a shuffle becomes part of it (ShuffleParams::cast).
// Returns how many.
int fuse_cast_into_shuffle(Network& net, std::vector<std::string>& fusions);

// Chains (and trees) of float elementwise layers become one FusedElementwise layer.
void fuse_elementwise(Network& net, std::vector<std::string>& fusions);

}  // namespace kiln::engine
