// Convolution + inference batch norm -> one convolution with scaled weights and a shifted bias.
// Frozen weights make both constant, so the batch norm costs nothing at run time instead of a
// pass over the activation; it also lets the engine fuse the activation that follows into the
// convolution. torch's own frozen-graph pass does the arithmetic; it matches aten::conv1d/2d/3d,
// so traced aten::_convolution nodes are first written in that form.
#include <torch/csrc/jit/passes/frozen_conv_folding.h>
#include <torch/csrc/jit/passes/graph_rewrite_helper.h>

#include "ir/graph_utils.h"
#include "lowering/lower.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

struct Counts {
  size_t batch_norms = 0, convolutions = 0, marked = 0;
};

Counts count(const GraphPtr& graph) {
  Counts c;
  ir::for_each_node(graph->block(), [&](torch::jit::Node* node) {
    c.batch_norms += node->kind() == c10::aten::batch_norm;
    c.convolutions += node->kind() == c10::aten::_convolution;
    c.marked += node->hasAttribute(torch_executed_attr());
  });
  return c;
}

}  // namespace

bool fold_conv_batch_norm(GraphPtr& graph) {
  const Counts before = count(graph);
  // The rewrites make new nodes, which would lose module-fallback marks: such graphs keep theirs.
  if (before.batch_norms == 0 || before.marked > 0) return false;
  torch::jit::graph_rewrite_helper::replaceConvolutionWithAtenConv(graph);
  torch::jit::FoldFrozenConvBatchnorm(graph);
  const Counts after = count(graph);
  return after.batch_norms != before.batch_norms || after.convolutions != before.convolutions;
}

}  // namespace kiln::lowering
