// Common subexpression elimination: torch's alias-aware CSE, over every block.
#include <torch/csrc/jit/passes/common_subexpression_elimination.h>

#include "lowering/passes.h"

namespace kiln::lowering {

bool eliminate_common_subexpressions(GraphPtr& graph) {
  return torch::jit::EliminateCommonSubexpression(graph);
}

}  // namespace kiln::lowering
