// Writes through slice and select views of a tensor the graph creates become functional: the
// written region is scattered into a new value of the base tensor, and the base's later readers
// read that value instead.
//
//   %m = aten::new_zeros(%x, %sizes, ...)         %m = aten::new_zeros(%x, %sizes, ...)
//   %r = aten::slice(%m, 0, 0, -7, 1)             %r = aten::slice(%m, 0, 0, -7, 1)
//   %c = aten::slice(%r, 1, -7, -3, 1)      ->    %c = aten::slice(%r, 1, -7, -3, 1)
//   %_ = aten::fill_(%c, 4)                       %v = aten::full_like(%c, 4, ...)
//   %y = aten::view(%m, ...)                      %r2 = aten::slice_scatter(%r, %v, 1, -7, -3, 1)
//                                                 %m2 = aten::slice_scatter(%m, %r2, 0, 0, -7, 1)
//                                                 %y = aten::view(%m2, ...)
//
// Traced models build masks this way (swin's shifted-window attention mask: zeros, then nine
// fills of slices); torch's remove-mutation pass leaves writes through views alone, and the
// engine takes only pure ops. A write is rewritten only when nothing can observe the difference:
//   - the base is made by an op whose result aliases nothing (not a graph input, not a view);
//   - each view in the chain from the base to the written tensor has no other reader, and the
//     write's own result is unused;
//   - every reader of the base before the write neither aliases nor writes it (by its schema),
//     so values computed before the write keep the base's old contents, as in eager.
// Writes are taken in program order, so the next write's chain starts at the previous one's value.
#include "lowering/lower.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

bool is_tensor(const Value* v) {
  return v->type()->kind() == c10::TypeKind::TensorType;
}

bool is_slice(const Node* n) {
  return n->kind() == c10::aten::slice && n->inputs().size() == 5 && is_tensor(n->input(0));
}

bool is_select(const Node* n) {
  return n->kind() == c10::aten::select && n->inputs().size() == 3 && is_tensor(n->input(0)) &&
         n->input(2)->type()->kind() == c10::TypeKind::IntType;
}

// fill_(self, Scalar|Tensor value) or copy_(self, src, non_blocking).
bool is_write(const Node* n) {
  return (n->kind() == c10::aten::fill_ && n->inputs().size() == 2) ||
         (n->kind() == c10::aten::copy_ && n->inputs().size() == 3 && is_tensor(n->input(1)));
}

// A node whose schema says that none of its results aliases an input and that it writes nothing.
bool pure_by_schema(const Node* n) {
  const auto* schema = n->maybeSchema();
  if (!schema) return false;
  for (const auto& a : schema->arguments()) {
    if (a.alias_info()) return false;
  }
  for (const auto& r : schema->returns()) {
    if (r.alias_info()) return false;
  }
  return true;
}

// The views from the written tensor up to the base (innermost first), or nullopt when the write
// does not qualify (see the file comment).
std::optional<std::vector<Node*>> view_chain(Node* write) {
  std::vector<Node*> chain;
  if (!write->output()->uses().empty()) return std::nullopt;
  Value* v = write->input(0);
  while (is_slice(v->node()) || is_select(v->node())) {
    if (v->uses().size() != 1) return std::nullopt;
    chain.push_back(v->node());
    v = v->node()->input(0);
  }
  Node* producer = v->node();
  if (producer->kind() == c10::prim::Param || producer->owningBlock() != write->owningBlock() ||
      !pure_by_schema(producer)) {
    return std::nullopt;
  }
  // The source of a copy must not read the base through a view (x[1:] = x[:-1]): it is a reader
  // before the write that aliases the base, which the check below refuses.
  const Node* first_view = chain.empty() ? write : chain.back();
  for (const auto& use : v->uses()) {
    Node* user = use.user;
    if (user == first_view) continue;
    if (user->owningBlock() != write->owningBlock()) {
      // A reader in a nested block: refuse unless it is wholly after the write.
      const Node* outer = user;
      while (outer->owningBlock() != write->owningBlock())
        outer = outer->owningBlock()->owningNode();
      if (!outer->isAfter(write)) return std::nullopt;
      continue;
    }
    if (user->isAfter(write)) continue;
    if (!pure_by_schema(user)) return std::nullopt;
  }
  return chain;
}

// The written tensor's new contents, inserted before `write`.
Value* written_value(torch::jit::Graph& g, Node* write) {
  Value* target = write->input(0);
  Value* value = write->input(1);
  if (!is_tensor(value)) {
    Value* none = g.insertConstant(c10::IValue());
    Node* full = g.create(c10::aten::full_like, {target, value, none, none, none, none, none});
    return g.insertNode(full)->output()->setType(target->type());
  }
  // Tensor values (fill_ with a 0-d tensor, copy_) take the target's dtype, then broadcast.
  Value* cast = g.insertNode(g.create(c10::aten::type_as, {value, target}))->output();
  return g.insertNode(g.create(c10::aten::expand_as, {cast, target}))
      ->output()
      ->setType(target->type());
}

bool functionalize_block(torch::jit::Block* block) {
  bool changed = false;
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    Node* n = *it;
    ++it;
    for (torch::jit::Block* sub : n->blocks()) changed |= functionalize_block(sub);
    // Nodes marked for module fallback keep their in-place form (the rewrite would drop the mark).
    if (!is_write(n) || is_torch_executed(n)) continue;
    const auto chain = view_chain(n);
    if (!chain) continue;
    torch::jit::Graph& g = *n->owningGraph();
    torch::jit::WithInsertPoint guard(n);
    Value* value = written_value(g, n);
    for (Node* view : *chain) {
      Value* parent = view->input(0);
      Node* scatter = is_slice(view) ? g.create(c10::aten::slice_scatter,
                                                {parent, value, view->input(1), view->input(2),
                                                 view->input(3), view->input(4)})
                                     : g.create(c10::aten::select_scatter,
                                                {parent, value, view->input(1), view->input(2)});
      value = g.insertNode(scatter)->output()->setType(parent->type());
    }
    Value* base = chain->empty() ? n->input(0) : chain->back()->input(0);
    base->replaceAllUsesAfterNodeWith(n, value);
    n->destroy();
    changed = true;
  }
  return changed;
}

}  // namespace

bool functionalize_view_writes(GraphPtr& graph) {
  return functionalize_block(graph->block());
}

}  // namespace kiln::lowering
