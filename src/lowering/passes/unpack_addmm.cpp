// addmm unpacking: aten::addmm(b, x, w, 1, 1) left after fuse_linear becomes matmul + add, so
// conversion needs no addmm converter (its bias may broadcast in ways linear's cannot).
#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {

bool unpack_addmm(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](torch::jit::Node* node) {
    // beta/alpha other than 1 would need scaling nodes; such addmm stays whole.
    if (node->kind() != c10::aten::addmm || node->inputs().size() != 5 ||
        !is_constant_one(node->input(3)) || !is_constant_one(node->input(4))) {
      return;
    }
    torch::jit::WithInsertPoint guard(node);
    torch::jit::Node* matmul = graph->create(c10::aten::matmul, {node->input(1), node->input(2)});
    matmul->insertBefore(node);
    matmul->output()->setType(node->output()->type());
    torch::jit::Value* one = graph->insertConstant(1);
    torch::jit::Node* add = graph->create(c10::aten::add, {matmul->output(), node->input(0), one});
    add->insertBefore(node);
    add->output()->setType(node->output()->type());
    inherit_fallback_mark(node, matmul);
    inherit_fallback_mark(node, add);
    replace_and_destroy(node, add->output());
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
