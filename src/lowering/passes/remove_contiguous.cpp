// Contiguous removal: the engine chooses its own layouts, so aten::contiguous is dropped where
// nothing depends on the copy it may make.
//
// PyTorch code still runs around the engine: a view() of the result needs contiguous memory
// (it becomes reshape(), which copies only when it must), and a result that is written in place
// must stay a copy, so such contiguous calls are kept.
#include <torch/csrc/jit/ir/alias_analysis.h>

#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;

bool removable(Node* node, const torch::jit::AliasDb& aliases) {
  if (node->kind() != c10::aten::contiguous || node->outputs().size() != 1) return false;
  // memory_format other than contiguous_format (channels_last) is a layout request, not a no-op.
  if (node->inputs().size() == 2) {
    auto format = constant_value(node->input(1));
    if (!format || !format->isInt() ||
        format->toInt() != static_cast<int64_t>(c10::MemoryFormat::Contiguous)) {
      return false;
    }
  }
  if (aliases.hasWriters(node->output()) || aliases.hasWriters(node->input(0))) return false;
  for (const auto& use : node->output()->uses()) {
    const Node* user = use.user;
    if (user->kind() == c10::aten::view && aliases.hasWriters(user->output())) return false;
  }
  return true;
}

}  // namespace

bool remove_contiguous(GraphPtr& graph) {
  std::vector<Node*> doomed;
  {
    torch::jit::AliasDb aliases(graph);
    ir::for_each_node(graph->block(), [&](Node* node) {
      if (removable(node, aliases)) doomed.push_back(node);
    });
  }
  for (Node* node : doomed) {
    std::vector<Node*> views;
    for (const auto& use : node->output()->uses()) {
      if (use.user->kind() == c10::aten::view) views.push_back(use.user);
    }
    for (Node* view : views) {
      Node* reshape = graph->create(c10::aten::reshape, {view->input(0), view->input(1)});
      reshape->insertBefore(view);
      reshape->output()->setType(view->output()->type());
      inherit_fallback_mark(view, reshape);
      replace_and_destroy(view, reshape->output());
    }
    replace_and_destroy(node, node->input(0));
  }
  return !doomed.empty();
}

}  // namespace kiln::lowering
