// Declarations of the lowering passes, one per file in passes/.
#pragma once

#include <torch/script.h>

#include <memory>

namespace kiln::lowering {

using GraphPtr = std::shared_ptr<torch::jit::Graph>;

// Removes nodes whose outputs are unused and that have no side effects, in every block.
bool eliminate_dead_code(GraphPtr& graph);

}  // namespace kiln::lowering
