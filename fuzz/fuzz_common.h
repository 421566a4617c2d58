// Shared by the fuzz targets: what counts as a clean rejection, and small-input limits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/runtime.h"
#include "util/errors.h"

namespace kiln::fuzz {

// Plans whose inputs, outputs or activations exceed these are loaded and validated but not run:
// the fuzzer looks for crashes, not for plans that legitimately ask for gigabytes or for minutes
// of compute (attention over 2^16 x 2^16 positions, a matmul of two 32 MB activations).
constexpr int64_t kMaxRunElements = 1 << 12;
constexpr size_t kMaxRunBytes = 1 << 20;

// A kiln error is a clean rejection; with KILN_FUZZ_VERBOSE=1 in the environment it is printed,
// so that replaying one input (`<target>_fuzz FILE`) shows what kiln said about it.
void rejected(const Error& e);

// Builds inputs of each input's `min` profile shape (ones; deterministic), or returns false when
// they would be too large to run quickly.
bool make_small_inputs(const engine::Engine& engine, std::vector<engine::HostTensor>& inputs);

// Runs `engine` once on make_small_inputs() if its activations fit kMaxRunBytes. kiln::Error is
// a clean rejection; anything else propagates to libFuzzer as a crash.
void run_if_small(const std::shared_ptr<const engine::Engine>& engine);

}  // namespace kiln::fuzz
