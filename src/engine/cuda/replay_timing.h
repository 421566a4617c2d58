// Timing of alternatives as the engine's CUDA graphs run them: the GEMMs' cuBLASLt candidates
// (matmul.cpp) and the attention layer's two forms (attention_choice.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <limits>
#include <vector>

namespace kiln::engine::cuda {

struct ReplayTiming {
  int rounds = 5;    // rounds over the candidates still in the running
  int launches = 5;  // launches of a candidate a round (one graph of them)
  // After the first round, only candidates within `keep` times the fastest (and candidate 0, the
  // one the others are measured against) go on to the next rounds.
  float keep = std::numeric_limits<float>::infinity();
};

// Host milliseconds of a timing's phases (for KILN_CUDA_TUNING_LOG): the set-up, the candidates'
// first launches (which load their kernels' modules), the captures, the timed rounds.
struct ReplayPhases {
  double setup = 0, first_launches = 0, captures = 0, rounds = 0;
  int survivors = 0;  // candidates left after the first round
};

// The median milliseconds of `how.launches` launches of each of `count` candidates, each launched
// by `launch(i, stream)` (false, or an Error thrown, where it could not be): on a stream of the
// timing's own after the work enqueued on `after` so far, every candidate launched once, then its
// launches captured into a CUDA graph and timed as the graph's replays (a candidate whose launches
// cannot be captured is timed as launched), round-robin (so that clock drift falls on all alike),
// one synchronization a round. +inf for a candidate that could not launch or dropped out after
// the first round. Returns with the timing's work done. Never call it while `after` is being
// captured.
std::vector<float> time_replays(cudaStream_t after, int count,
                                const std::function<bool(int, cudaStream_t)>& launch,
                                const ReplayTiming& how = {}, ReplayPhases* phases = nullptr);

}  // namespace kiln::engine::cuda
