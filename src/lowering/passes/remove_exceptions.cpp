// Exception removal: an If whose one branch only raises becomes its other branch (seed 001).
//
// Scripted modules guard their inputs (`if x.dim() != 4: raise ValueError(...)`, the batch-norm
// dimension check). The engine has no exceptions and the compile spec fixes what the inputs are,
// so the check is dropped and the branch that does the work is inlined in place of the If; the
// condition it leaves unused goes with dead code elimination.
#include "ir/graph_utils.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

// True when the block always raises and does nothing else observable: it holds a top-level
// prim::RaiseException and every other node only builds the message (no side effects).
bool only_raises(torch::jit::Block* block) {
  bool raises = false;
  for (torch::jit::Node* node : block->nodes()) {
    if (node->kind() == torch::jit::prim::RaiseException) {
      raises = true;
    } else if (node->hasSideEffects() || !node->blocks().empty()) {
      return false;
    }
  }
  return raises;
}

}  // namespace

bool remove_exceptions(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](torch::jit::Node* node) {
    if (node->kind() != torch::jit::prim::If) return;
    const bool then_raises = only_raises(node->blocks()[0]);
    const bool else_raises = only_raises(node->blocks()[1]);
    if (then_raises == else_raises) return;  // neither raises, or the If always raises
    torch::jit::Block* kept = node->blocks()[then_raises ? 1 : 0];
    std::vector<torch::jit::Node*> body(kept->nodes().begin(), kept->nodes().end());
    for (torch::jit::Node* n : body) n->moveBefore(node);
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      node->output(i)->replaceAllUsesWith(kept->outputs()[i]);
    }
    node->destroy();
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
