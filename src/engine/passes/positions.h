// Where each element of a tensor comes from, as positions in a source laid out row-major, traced
// through permutations and shuffles: the map a chain of gathers and shuffles makes
// (gather_chains), and the rows a shuffle of whole rows moves (gathered_inputs).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/types.h"

namespace kiln::engine {

// Positions of a source (values) laid out as `shape`, row-major.
struct Positions {
  std::vector<int64_t> at;
  Shape shape;
};

// Whether `perm` is 0, 1, 2, ... (a permutation that moves nothing, or positions in place).
bool is_identity(const std::vector<int64_t>& perm);

// p permuted: result dim i is p's dim perm[i].
Positions permuted(const Positions& p, const std::vector<int64_t>& perm);

// p through a shuffle: permute(first) (identity when empty), a reshape, permute(second), to a
// result of shape `out` (of p's volume).
Positions shuffled(Positions p, const std::vector<int64_t>& first,
                   const std::vector<int64_t>& second, const Shape& out);

}  // namespace kiln::engine
