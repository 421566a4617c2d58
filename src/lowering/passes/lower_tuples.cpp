// Tuple lowering: matched TupleConstruct/TupleUnpack pairs go (torch's LowerSimpleTuples); then
// all tuples (LowerAllTuples) where that is possible without changing the graph's signature.
#include <torch/csrc/jit/passes/lower_tuples.h>

#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

bool has_tuple(at::ArrayRef<torch::jit::Value*> values) {
  for (const torch::jit::Value* v : values) {
    if (v->type()->kind() == c10::TypeKind::TupleType) return true;
  }
  return false;
}

// Tuple-making nodes and tuple-typed values (If/Loop outputs, block inputs) in all blocks.
size_t count_tuples(const torch::jit::Block& block) {
  size_t n = 0;
  for (const torch::jit::Value* v : block.inputs()) {
    n += v->type()->kind() == c10::TypeKind::TupleType;
  }
  for (const torch::jit::Node* node : block.nodes()) {
    const auto kind = node->kind();
    n += kind == torch::jit::prim::TupleUnpack || kind == torch::jit::prim::TupleIndex ||
         kind == torch::jit::prim::TupleSlice;
    for (const torch::jit::Value* v : node->outputs()) {
      n += v->type()->kind() == c10::TypeKind::TupleType;
    }
    for (const torch::jit::Block* sub : node->blocks()) n += count_tuples(*sub);
  }
  return n;
}

}  // namespace

bool lower_tuples(GraphPtr& graph) {
  const size_t before = count_tuples(*graph->block());
  torch::jit::LowerSimpleTuples(graph);
  // LowerAllTuples flattens tuple inputs and outputs, which would change how the compiled module
  // is called, and it throws on tuples it cannot remove (in lists, in some loops): it runs on a
  // copy that is kept only when it succeeds.
  if (!has_tuple(graph->inputs()) && !has_tuple(graph->outputs())) {
    auto copy = graph->copy();
    try {
      torch::jit::LowerAllTuples(copy);
      // The copy is renumbered and cleaned of dead code: adopt it only for what it is for.
      if (count_tuples(*copy->block()) < count_tuples(*graph->block())) graph = copy;
    } catch (const c10::Error&) {
    }
  }
  return count_tuples(*graph->block()) != before;
}

}  // namespace kiln::lowering
