// Traced models compute shapes as 0-d tensors: size() -> NumToTensor -> mul/floor_divide/div ->
// Int -> a reshape's size list. The same arithmetic on ints is static metadata the converters can
// evaluate (and follow through dynamic dims); on tensors it is run-time work. This pass moves such
// chains back to int ops. Tensor uses of a result keep working through a new NumToTensor.
#include <unordered_map>
#include <unordered_set>

#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// The int op for a tensor op on two ints, or nothing.
std::optional<c10::Symbol> int_op(const Node* n) {
  const auto k = n->kind();
  if (k == c10::aten::mul) return c10::aten::mul;
  if (k == c10::aten::floor_divide) return c10::aten::floordiv;
  if (k == c10::aten::remainder) return c10::aten::remainder;
  // Sizes are never negative, so truncating and flooring division agree on them; the caller
  // only rewrites when both operands are known non-negative.
  if (k == c10::aten::div && n->inputs().size() == 3) {
    auto mode = constant_value(n->input(2));
    if (mode && mode->isString() &&
        (mode->toStringRef() == "floor" || mode->toStringRef() == "trunc")) {
      return c10::aten::floordiv;
    }
    return std::nullopt;
  }
  // add/sub take an alpha; only alpha 1 is plain int arithmetic. rsub(a, b) is b - a (Python's
  // `7 - size % 7`, swin's padding), swapped by the caller.
  if (k == c10::aten::add || k == c10::aten::sub || k == c10::aten::rsub) {
    if (n->inputs().size() == 3 && !is_constant_one(n->input(2))) return std::nullopt;
    return k == c10::aten::rsub ? c10::aten::sub : k;
  }
  return std::nullopt;
}

}  // namespace

bool scalarize_size_arithmetic(GraphPtr& graph) {
  bool changed = false;
  std::unordered_map<const Value*, Value*> int_of;  // 0-d long tensor -> the int it holds
  std::unordered_set<const Value*> non_negative;    // ints known to be >= 0 (sizes and such)
  auto is_non_negative = [&](const Value* v) {
    if (non_negative.count(v)) return true;
    auto c = constant_value(v);
    return c && c->isInt() && c->toInt() >= 0;
  };
  // An int for `v`: a tracked size tensor, an int constant, or a 0-d integer tensor constant
  // (traces record Python ints multiplied into sizes as those), made an int before `at`.
  auto as_int = [&](Value* v, Node* at) -> Value* {
    auto it = int_of.find(v);
    if (it != int_of.end()) return it->second;
    auto c = constant_value(v);
    if (!c) return nullptr;
    if (c->isInt()) return v;
    if (c->isTensor() && c->toTensor().dim() == 0 &&
        c10::isIntegralType(c->toTensor().scalar_type(), /*includeBool=*/false)) {
      torch::jit::WithInsertPoint guard(at);
      return at->owningGraph()->insertConstant(c->toTensor().item<int64_t>());
    }
    return nullptr;
  };
  ir::for_each_node(graph->block(), [&](Node* n) {
    if (n->kind() == c10::prim::NumToTensor &&
        n->input(0)->type()->kind() == c10::TypeKind::IntType) {
      int_of[n->output()] = n->input(0);
      const auto k = n->input(0)->node()->kind();
      if (k == c10::aten::size || k == c10::aten::len ||
          k == c10::Symbol::fromQualString("aten::numel") || k == c10::aten::dim) {
        non_negative.insert(n->input(0));
      }
      return;
    }
    if (n->kind() == c10::aten::Int || n->kind() == c10::aten::IntImplicit ||
        n->kind() == c10::aten::ScalarImplicit) {
      auto it = int_of.find(n->input(0));
      if (it == int_of.end() || n->outputs().size() != 1) return;
      replace_and_destroy(n, it->second);
      changed = true;
      return;
    }
    auto op = int_op(n);
    if (!op || n->inputs().size() < 2 || n->outputs().size() != 1) return;
    // At least one operand must be a tracked size tensor (a constant int alone is not a size).
    if (!int_of.count(n->input(0)) && !int_of.count(n->input(1))) return;
    Value* a = as_int(n->input(0), n);
    Value* b = as_int(n->input(1), n);
    if (!a || !b) return;
    const bool both_non_negative = is_non_negative(a) && is_non_negative(b);
    if (n->kind() == c10::aten::div && !both_non_negative) return;  // trunc != floor below 0
    torch::jit::WithInsertPoint guard(n);
    auto* g = n->owningGraph();
    const bool swapped = n->kind() == c10::aten::rsub;
    Value* r = swapped ? g->insert(*op, {b, a}) : g->insert(*op, {a, b});
    Node* t = g->insertNode(g->create(c10::prim::NumToTensor, {r}, 1));
    t->output()->setType(n->output()->type());
    inherit_fallback_mark(n, r->node());
    inherit_fallback_mark(n, t);
    int_of[t->output()] = r;
    if (both_non_negative && *op != c10::aten::sub) non_negative.insert(r);
    replace_and_destroy(n, t->output());
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
