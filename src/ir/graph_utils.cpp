// Graph helpers: node counting and the one recursive walk every pass uses.
#include "ir/graph_utils.h"

#include <vector>

namespace kiln::ir {

size_t count_nodes(const torch::jit::Block& block) {
  size_t n = 0;
  for (const torch::jit::Node* node : block.nodes()) {
    ++n;
    for (const torch::jit::Block* sub : node->blocks()) n += count_nodes(*sub);
  }
  return n;
}

void for_each_node(torch::jit::Block* block, const std::function<void(torch::jit::Node*)>& fn) {
  std::vector<torch::jit::Node*> nodes(block->nodes().begin(), block->nodes().end());
  for (torch::jit::Node* node : nodes) {
    for (torch::jit::Block* sub : node->blocks()) for_each_node(sub, fn);
    fn(node);
  }
}

}  // namespace kiln::ir
