// No-op removal (peephole): ops that return their input's values unchanged are replaced by it.
//
// detach, alias and lift_fresh (export's constant tensors; lift_fresh_copy too, as exported graphs
// are functional); x.t().t(); expand/expand_as, view_as, reshape_as and type_as of a tensor to
// itself; expand to its own size(). Each result aliases or equals its input, so uses can read the
// input directly.
#include "ir/graph_utils.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// The value `node` passes through unchanged, or nullptr if it is not a no-op.
Value* noop_source(Node* node) {
  if (node->outputs().size() != 1 || node->inputs().empty()) return nullptr;
  Value* self = node->input(0);
  const auto kind = node->kind();
  static const auto lift_fresh = c10::Symbol::fromQualString("aten::lift_fresh");
  static const auto lift_fresh_copy = c10::Symbol::fromQualString("aten::lift_fresh_copy");
  if (kind == c10::aten::detach || kind == c10::aten::alias || kind == lift_fresh ||
      kind == lift_fresh_copy) {
    return node->inputs().size() == 1 ? self : nullptr;
  }
  if (kind == c10::aten::t && node->inputs().size() == 1 && self->node()->kind() == c10::aten::t &&
      self->node()->inputs().size() == 1) {
    // t() is an involution wherever it is defined (rank <= 2).
    return self->node()->input(0);
  }
  if ((kind == c10::aten::expand_as || kind == c10::aten::view_as ||
       kind == c10::aten::reshape_as || kind == c10::aten::type_as) &&
      node->inputs().size() == 2 && node->input(1) == self) {
    return self;
  }
  if (kind == c10::aten::expand && node->inputs().size() == 3) {
    const Node* sizes = node->input(1)->node();
    if (sizes->kind() == c10::aten::size && sizes->inputs().size() == 1 &&
        sizes->input(0) == self) {
      return self;
    }
  }
  return nullptr;
}

}  // namespace

bool remove_noops(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](Node* node) {
    Value* source = noop_source(node);
    if (!source || source->type()->kind() != node->output()->type()->kind()) return;
    // The inner t() of x.t().t() may have other uses; if not, dead code elimination takes it.
    node->output()->replaceAllUsesWith(source);
    node->destroy();
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
