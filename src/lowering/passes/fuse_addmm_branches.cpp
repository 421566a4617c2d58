// addmm branch fusion: the two-branch linear of older scripted modules becomes one matmul + add.
//
//   %r = prim::If(%is_2d)
//     block0(): %a = aten::addmm(%b, %x, %w, 1, 1) -> (%a)
//     block1(): %m = aten::matmul(%x, %w); %o = aten::add_(%m, %b, 1) -> (%o)
//
// Both branches compute x @ w + b, so neither the condition nor addmm's 2-D restriction matters:
// the If is replaced by matmul + add on %x, which fuse_linear then turns into aten::linear.
// Seed 001 fuses into addmm; matmul + add is what both branches agree on for every rank.
#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// The non-constant nodes of a block.
std::vector<Node*> compute_nodes(Block* block) {
  std::vector<Node*> out;
  for (Node* n : block->nodes()) {
    if (n->kind() != torch::jit::prim::Constant) out.push_back(n);
  }
  return out;
}

// `a` and `b` are the same weight: one value, or t() of one value (each branch may transpose).
bool same_weight(Value* a, Value* b) {
  if (a == b) return true;
  const Node* na = a->node();
  const Node* nb = b->node();
  return na->kind() == c10::aten::t && nb->kind() == c10::aten::t && na->input(0) == nb->input(0);
}

// Nodes of a branch that produce the weight: at most one t() whose input lives outside.
bool weight_prelude_ok(const std::vector<Node*>& nodes, size_t compute_start, Value* weight) {
  if (compute_start == 0) return true;
  return compute_start == 1 && nodes[0]->kind() == c10::aten::t && nodes[0]->output() == weight &&
         weight->uses().size() == 1;
}

struct Linear {
  Value* x;
  Value* w;
  Value* b;
};

std::optional<Linear> match_addmm(Block* block) {
  auto nodes = compute_nodes(block);
  if (nodes.empty() || block->outputs().size() != 1) return std::nullopt;
  Node* addmm = nodes.back();
  if (addmm->kind() != c10::aten::addmm || addmm->inputs().size() != 5 ||
      block->outputs()[0] != addmm->output() || !is_constant_one(addmm->input(3)) ||
      !is_constant_one(addmm->input(4))) {
    return std::nullopt;
  }
  if (!weight_prelude_ok(nodes, nodes.size() - 1, addmm->input(2))) return std::nullopt;
  return Linear{addmm->input(1), addmm->input(2), addmm->input(0)};
}

std::optional<Linear> match_matmul_add(Block* block) {
  auto nodes = compute_nodes(block);
  if (nodes.size() < 2 || block->outputs().size() != 1) return std::nullopt;
  Node* matmul = nodes[nodes.size() - 2];
  Node* add = nodes.back();
  const bool is_add = add->kind() == c10::aten::add || add->kind() == c10::aten::add_;
  if (matmul->kind() != c10::aten::matmul || !is_add || add->inputs().size() != 3 ||
      add->input(0) != matmul->output() || !is_constant_one(add->input(2)) ||
      block->outputs()[0] != add->output() || matmul->output()->uses().size() != 1) {
    return std::nullopt;
  }
  if (!weight_prelude_ok(nodes, nodes.size() - 2, matmul->input(1))) return std::nullopt;
  return Linear{matmul->input(0), matmul->input(1), add->input(1)};
}

bool defined_outside(Value* v, Node* if_node) {
  return v->node()->owningBlock() != if_node->blocks()[0] &&
         v->node()->owningBlock() != if_node->blocks()[1];
}

}  // namespace

bool fuse_addmm_branches(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](Node* node) {
    if (node->kind() != torch::jit::prim::If || node->outputs().size() != 1) return;
    for (int addmm_branch : {0, 1}) {
      auto a = match_addmm(node->blocks()[addmm_branch]);
      auto m = match_matmul_add(node->blocks()[1 - addmm_branch]);
      if (!a || !m || a->x != m->x || a->b != m->b || !same_weight(a->w, m->w)) continue;
      if (!defined_outside(a->x, node) || !defined_outside(a->b, node)) continue;
      Value* weight = a->w;
      if (!defined_outside(weight, node)) {
        // The weight is t(W) inside the branch: make one t(W) before the If.
        Node* t = graph->create(c10::aten::t, {weight->node()->input(0)});
        t->insertBefore(node);
        t->output()->setType(weight->type());
        weight = t->output();
      }
      Node* matmul = graph->create(c10::aten::matmul, {a->x, weight});
      matmul->insertBefore(node);
      matmul->output()->setType(node->output()->type());
      torch::jit::WithInsertPoint guard(node);
      Value* one = graph->insertConstant(1);
      Node* add = graph->create(c10::aten::add, {matmul->output(), a->b, one});
      add->insertBefore(node);
      add->output()->setType(node->output()->type());
      inherit_fallback_mark(node, matmul);
      inherit_fallback_mark(node, add);
      replace_and_destroy(node, add->output());
      changed = true;
      return;
    }
  });
  return changed;
}

}  // namespace kiln::lowering
