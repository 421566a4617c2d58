// log_softmax unpacking: aten::log_softmax(x, dim, dtype) becomes log(softmax(x, dim, dtype)),
// so conversion reuses the softmax and log converters (seed 001).
#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {

bool unpack_log_softmax(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](torch::jit::Node* node) {
    // Only the int-dim overload: a named dim (Dimname) has no softmax converter either.
    if (node->kind() != c10::aten::log_softmax || node->inputs().size() != 3 ||
        node->input(1)->type()->kind() != c10::TypeKind::IntType) {
      return;
    }
    torch::jit::Node* softmax =
        graph->create(c10::aten::softmax, {node->input(0), node->input(1), node->input(2)});
    softmax->insertBefore(node);
    softmax->output()->setType(node->output()->type());
    torch::jit::Node* log = graph->create(c10::aten::log, {softmax->output()});
    log->insertBefore(node);
    log->output()->setType(node->output()->type());
    inherit_fallback_mark(node, softmax);
    inherit_fallback_mark(node, log);
    replace_and_destroy(node, log->output());
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
