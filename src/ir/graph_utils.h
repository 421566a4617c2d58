// Small graph helpers shared by passes and tests.
#pragma once

#include <torch/script.h>

#include <cstddef>
#include <functional>

namespace kiln::ir {

// Lowering's module-fallback pass marks every node of a torch_executed_modules module with this
// int attribute (value 1); partitioning keeps such nodes in PyTorch.
inline constexpr const char* kTorchExecutedAttr = "kiln_torch_executed";

// Number of nodes in the block and all its sub-blocks (prim::Constant included).
size_t count_nodes(const torch::jit::Block& block);

// Calls `fn` on every node of the block and, depth first, of its sub-blocks. The node list is
// snapshotted per block so `fn` may destroy the node it is given.
void for_each_node(torch::jit::Block* block, const std::function<void(torch::jit::Node*)>& fn);

// A deep copy of a graph held by const reference: torch::jit::Graph::copy() is not const,
// although copying never mutates the source.
inline std::shared_ptr<torch::jit::Graph> copy_graph(const torch::jit::Graph& graph) {
  return const_cast<torch::jit::Graph&>(graph).copy();
}

}  // namespace kiln::ir
