// Constant pooling: one prim::Constant per distinct value, hoisted to the top of the graph.
#include <torch/csrc/jit/passes/constant_pooling.h>

#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

size_t count_constants(const torch::jit::Block& block) {
  size_t n = 0;
  for (const torch::jit::Node* node : block.nodes()) {
    n += node->kind() == torch::jit::prim::Constant;
    for (const torch::jit::Block* sub : node->blocks()) n += count_constants(*sub);
  }
  return n;
}

// Constants that already form a prefix of the top-level block are where pooling puts them.
size_t leading_constants(const torch::jit::Block& block) {
  size_t n = 0;
  for (const torch::jit::Node* node : block.nodes()) {
    if (node->kind() != torch::jit::prim::Constant) break;
    ++n;
  }
  return n;
}

}  // namespace

bool pool_constants(GraphPtr& graph) {
  // torch's pass reports nothing. It merges equal constants and hoists them all to the top (in
  // an order of its own): it did something when it removed one or moved one into the prefix.
  const size_t total = count_constants(*graph->block());
  const bool already_pooled = leading_constants(*graph->block()) == total;
  torch::jit::ConstantPooling(graph);
  return count_constants(*graph->block()) != total || !already_pooled;
}

}  // namespace kiln::lowering
