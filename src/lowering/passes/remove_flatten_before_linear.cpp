// Flatten removal: an aten::flatten that does not change its input's shape, feeding only
// aten::linear, is dropped (seed 001 drops every flatten before linear because TensorRT's FC
// layer flattens implicitly; kiln's matmul does not, so only no-op flattens go).
#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;

bool feeds_only_linear_input(const Node* flatten) {
  const auto& uses = flatten->output()->uses();
  if (uses.empty()) return false;
  for (const auto& use : uses) {
    if (use.user->kind() != c10::aten::linear || use.offset != 0) return false;
  }
  return true;
}

// flatten(x, start, end) returns x exactly when start and end name one dim of a tensor of rank
// >= 1 (a 0-d tensor becomes shape [1]).
bool is_noop_flatten(const Node* node) {
  if (node->kind() != c10::aten::flatten || node->inputs().size() != 3) return false;
  auto start = constant_value(node->input(1));
  auto end = constant_value(node->input(2));
  if (!start || !end || !start->isInt() || !end->isInt()) return false;
  int64_t s = start->toInt(), e = end->toInt();
  if (auto rank = known_rank(node->input(0))) {
    if (*rank == 0) return false;
    if (s < 0) s += *rank;
    if (e < 0) e += *rank;
    return s == e;
  }
  // Unknown rank: any dim other than 0/-1 proves rank >= 2 (flatten would fail otherwise).
  return s == e && s != 0 && s != -1;
}

}  // namespace

bool remove_flatten_before_linear(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](Node* node) {
    if (!is_noop_flatten(node) || !feeds_only_linear_input(node)) return;
    replace_and_destroy(node, node->input(0));
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
