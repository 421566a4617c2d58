// Dead code elimination: torch's side-effect-aware DCE, reporting whether anything was removed.
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "ir/graph_utils.h"
#include "lowering/passes.h"

namespace kiln::lowering {

bool eliminate_dead_code(GraphPtr& graph) {
  const size_t before = ir::count_nodes(*graph->block());
  torch::jit::EliminateDeadCode(graph);
  return ir::count_nodes(*graph->block()) != before;
}

}  // namespace kiln::lowering
