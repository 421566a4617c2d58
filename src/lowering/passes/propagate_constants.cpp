// Constant propagation: evaluates nodes whose inputs are all constants (torch's pass), which
// folds what freezing made static: training flags, attribute checks, shapes of constants.
#include <torch/csrc/jit/passes/constant_propagation.h>

#include "lowering/passes.h"

namespace kiln::lowering {

bool propagate_constants(GraphPtr& graph) {
  return torch::jit::ConstantPropagation(graph);
}

}  // namespace kiln::lowering
