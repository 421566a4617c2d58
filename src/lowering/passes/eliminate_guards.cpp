// Guard elimination: drops checks that are ops rather than If/raise pairs (see remove_exceptions).
//
// Besides `if cond: raise`, scripted and exported code checks inputs with assert ops
// (aten::_assert_async, aten::_assert_tensor_metadata, ...). They compute nothing and the compile
// spec already fixes what they test, so they go. prim::Guard/TypeCheck of the profiling executor
// never reach a frozen graph and are left to torch.
#include <array>

#include "ir/graph_utils.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

bool is_assert_op(const torch::jit::Node* node) {
  // By name: several exist only in newer torch, and interning an unknown name is harmless.
  static const std::array<const char*, 5> kAsserts = {
      "aten::_assert_async", "aten::_assert_tensor_metadata", "aten::_assert_scalar",
      "aten::sym_constrain_range", "aten::sym_constrain_range_for_size"};
  for (const char* name : kAsserts) {
    if (node->kind() == c10::Symbol::fromQualString(name)) return true;
  }
  return false;
}

}  // namespace

bool eliminate_guards(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](torch::jit::Node* node) {
    if (!is_assert_op(node) || !node->outputs().empty()) return;
    node->destroy();
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
