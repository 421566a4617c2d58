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

bool makes_view(c10::Symbol kind) {
  static const c10::Symbol kViews[] = {
      c10::aten::select,     c10::aten::slice,    c10::aten::transpose, c10::aten::permute,
      c10::aten::unsqueeze,  c10::aten::squeeze,  c10::aten::expand,    c10::aten::t,
      c10::aten::narrow,     c10::aten::unbind,   c10::aten::split,     c10::aten::chunk,
      c10::aten::as_strided, c10::aten::diagonal, c10::aten::view_as,   c10::aten::unflatten};
  for (c10::Symbol v : kViews) {
    if (kind == v) return true;
  }
  return false;
}

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
    // A view of a view (x.contiguous()[0].view(...)) would meet non-contiguous memory once the
    // copy is gone, and only direct view() users are rewritten to reshape(): keep the copy.
    if (makes_view(user->kind())) return false;
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
