// Linear fusion: addmm(b, x, W.t()) and matmul(x, W.t()) [+ b] become aten::linear(x, W, b).
//
// Scripted modules spell nn.Linear in several ways; conversion maps one aten::linear to one
// matmul layer with a bias epilogue. addmm takes any bias (linear of a 2-D input is addmm);
// matmul + add needs a 1-D bias and a 2-D weight, which is exactly when linear agrees with it
// for inputs of every rank.
#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// W when `v` is W.t(), else nullptr.
Value* untransposed(Value* v) {
  const Node* n = v->node();
  if (n->kind() != c10::aten::t || n->inputs().size() != 1) return nullptr;
  return n->input(0);
}

bool is_plain_add(const Node* n) {
  return (n->kind() == c10::aten::add || n->kind() == c10::aten::add_) && n->inputs().size() == 3 &&
         n->input(0)->type()->kind() == c10::TypeKind::TensorType &&
         n->input(1)->type()->kind() == c10::TypeKind::TensorType && is_constant_one(n->input(2));
}

// matmul(x, W.t()) with a 2-D W: the matmul that linear computes.
Value* linear_weight_of_matmul(const Node* matmul) {
  if (matmul->kind() != c10::aten::matmul || matmul->inputs().size() != 2) return nullptr;
  Value* w = untransposed(matmul->input(1));
  return w && known_rank(w) == 2 ? w : nullptr;
}

Value* insert_linear(GraphPtr& graph, Node* replaced, Value* x, Value* w, Value* b) {
  torch::jit::WithInsertPoint guard(replaced);
  if (!b) b = graph->insertConstant(c10::IValue());
  Node* linear = graph->create(c10::aten::linear, {x, w, b});
  linear->insertBefore(replaced);
  linear->output()->setType(replaced->output()->type());
  inherit_fallback_mark(replaced, linear);
  return linear->output();
}

// addmm(b, x, W.t(), 1, 1) -> linear(x, W, b)
bool fuse_addmm(GraphPtr& graph, Node* node) {
  if (node->kind() != c10::aten::addmm || node->inputs().size() != 5 ||
      !is_constant_one(node->input(3)) || !is_constant_one(node->input(4))) {
    return false;
  }
  Value* w = untransposed(node->input(2));
  if (!w) return false;
  replace_and_destroy(node, insert_linear(graph, node, node->input(1), w, node->input(0)));
  return true;
}

// add(matmul(x, W.t()), b) or add(b, matmul(...)) with 1-D b -> linear(x, W, b)
bool fuse_matmul_add(GraphPtr& graph, Node* add) {
  if (!is_plain_add(add)) return false;
  for (size_t i : {0, 1}) {
    Node* matmul = add->input(i)->node();
    Value* bias = add->input(1 - i);
    Value* w = linear_weight_of_matmul(matmul);
    // add_ writes its first input, so only add_(matmul, b) is a plain bias add.
    if (!w || (add->kind() == c10::aten::add_ && i != 0)) continue;
    if (matmul->output()->uses().size() != 1 || known_rank(bias) != 1) continue;
    replace_and_destroy(add, insert_linear(graph, add, matmul->input(0), w, bias));
    matmul->destroy();
    return true;
  }
  return false;
}

}  // namespace

bool fuse_linear(GraphPtr& graph) {
  bool changed = false;
  // Biased forms first, so a matmul is not taken as a bias-less linear before its add is seen.
  ir::for_each_node(graph->block(), [&](Node* node) {
    changed |= fuse_addmm(graph, node) || fuse_matmul_add(graph, node);
  });
  ir::for_each_node(graph->block(), [&](Node* node) {
    Value* w = linear_weight_of_matmul(node);
    if (!w) return;
    replace_and_destroy(node, insert_linear(graph, node, node->input(0), w, nullptr));
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
