// Dropout removal: in inference (train=False) every dropout variant returns its input unchanged.
#include <array>

#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

bool is_dropout(const torch::jit::Node* node) {
  static const std::array<c10::Symbol, 8> kDropouts = {c10::aten::dropout,
                                                       c10::aten::dropout_,
                                                       c10::aten::feature_dropout,
                                                       c10::aten::feature_dropout_,
                                                       c10::aten::alpha_dropout,
                                                       c10::aten::alpha_dropout_,
                                                       c10::aten::feature_alpha_dropout,
                                                       c10::aten::feature_alpha_dropout_};
  for (const auto& kind : kDropouts) {
    if (node->kind() == kind) return true;
  }
  return false;
}

}  // namespace

bool remove_dropout(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](torch::jit::Node* node) {
    // (input, p, train): a dropout known to be in eval mode, or with p = 0 (torchvision's swin
    // calls F.dropout(x, p=0.0) with the default train=True), is the identity; one that still
    // trains (or whose mode is a runtime value) is kept so results do not change.
    if (!is_dropout(node) || node->inputs().size() != 3 || node->outputs().size() != 1) return;
    const auto p = constant_value(node->input(1));
    const bool zero_p = p && (p->isDouble() || p->isInt()) && p->toScalar().toDouble() == 0.0;
    if (!is_constant_bool(node->input(2), false) && !zero_p) return;
    replace_and_destroy(node, node->input(0));
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
