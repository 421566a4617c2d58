// In-place ops (relu_, add_, ...) become their functional forms where no alias can observe the
// difference; the engine only takes pure ops, and traced models are full of in-place ones.
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "lowering/lower.h"
#include "lowering/passes.h"

namespace kiln::lowering {

bool remove_mutation(GraphPtr& graph) {
  // torch's alias analysis decides where a write is unobservable (inputs, aliases of inputs and
  // values written through views keep their in-place op).
  // Nodes marked for module fallback keep their in-place form: the functional replacement would
  // not carry the mark.
  const std::function<bool(torch::jit::Node*)> unmarked = [](torch::jit::Node* n) {
    return !is_torch_executed(n);
  };
  const bool tensors = torch::jit::RemoveTensorMutation(graph, unmarked);
  const bool lists = torch::jit::RemoveListMutation(graph);
  return tensors || lists;
}

}  // namespace kiln::lowering
