// Decompositions: composite ops rewritten into ops the engine has layers for (seed 001).
//
// Per op, the choice:
// - decomposed: var/std (the engine has no variance reduce: mean, sub, mul, sum, div[, sqrt]);
//   type_as (aten::to with `other`: one cast converter); square (mul); hardtanh and relu6
//   (clamp, which is an engine activation).
// - kept whole, because the engine runs them natively and one fused activation beats its
//   pieces: relu, sigmoid, tanh, gelu, silu, hardswish, hardsigmoid, leaky_relu, elu, softplus,
//   mish, selu, clamp (activation layer); rsqrt (unary layer); remainder (binary kMod).
#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Not an ATen native function, so not among c10::aten's interned symbols.
const c10::Symbol kNumel = c10::Symbol::fromQualString("aten::numel");

Value* insert(GraphPtr& graph, c10::Symbol kind, std::vector<torch::jit::NamedValue> args) {
  return graph->insert(kind, args);
}

// var/std in any overload: (self, unbiased) | .dim(self, dim, unbiased, keepdim) |
// .correction(self, dim, correction, keepdim). Returns the variance, or nullptr if the
// arguments are not constants this rewrite understands.
Value* decompose_variance(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema || node->outputs().size() != 1) return nullptr;
  const std::string& overload = schema->overload_name();
  Value* x = node->input(0);
  int64_t correction = 1;
  std::optional<c10::IValue> dims;
  bool keepdim = false;
  if (overload.empty() && node->inputs().size() == 2) {
    auto unbiased = constant_value(node->input(1));
    if (!unbiased || !unbiased->isBool()) return nullptr;
    correction = unbiased->toBool() ? 1 : 0;
  } else if ((overload == "dim" || overload == "correction") && node->inputs().size() == 4) {
    dims = constant_value(node->input(1));
    auto c = constant_value(node->input(2));
    auto k = constant_value(node->input(3));
    if (!dims || !c || !k || !k->isBool()) return nullptr;
    keepdim = k->toBool();
    if (c->isBool()) {
      correction = c->toBool() ? 1 : 0;
    } else if (c->isInt()) {
      correction = c->toInt();
    } else if (c->isDouble() && c->toDouble() == static_cast<double>(int64_t(c->toDouble()))) {
      correction = static_cast<int64_t>(c->toDouble());
    } else if (!c->isNone()) {
      return nullptr;
    }
    // dim=None or [] reduce everything; with keepdim that shape needs the rank, left alone.
    if (dims->isNone() || dims->toIntVector().empty()) {
      if (keepdim) return nullptr;
      dims.reset();
    }
  } else {
    return nullptr;
  }
  torch::jit::WithInsertPoint guard(node);
  if (!dims) {
    Value* mean = insert(graph, c10::aten::mean, {x});
    Value* diff = insert(graph, c10::aten::sub, {x, mean});
    Value* sum = insert(graph, c10::aten::sum, {insert(graph, c10::aten::mul, {diff, diff})});
    Value* n = insert(graph, kNumel, {x});
    return insert(graph, c10::aten::div, {sum, insert(graph, c10::aten::sub, {n, correction})});
  }
  Value* dim_list = graph->insertConstant(dims->toIntVector());
  Value* mean = insert(graph, c10::aten::mean, {x, dim_list, true});
  Value* diff = insert(graph, c10::aten::sub, {x, mean});
  Value* square = insert(graph, c10::aten::mul, {diff, diff});
  Value* sum = insert(graph, c10::aten::sum, {square, dim_list, keepdim});
  // Elements per reduced group: numel(x) / numel(mean), known at run time for dynamic shapes.
  Value* n = insert(graph, c10::aten::floordiv,
                    {insert(graph, kNumel, {x}), insert(graph, kNumel, {mean})});
  return insert(graph, c10::aten::div, {sum, insert(graph, c10::aten::sub, {n, correction})});
}

Value* decompose(GraphPtr& graph, Node* node) {
  const auto kind = node->kind();
  if (kind == c10::aten::var) return decompose_variance(graph, node);
  if (kind == c10::aten::std) {
    Value* var = decompose_variance(graph, node);
    if (!var) return nullptr;
    torch::jit::WithInsertPoint guard(node);
    return insert(graph, c10::aten::sqrt, {var});
  }
  torch::jit::WithInsertPoint guard(node);
  if (kind == c10::aten::type_as && node->inputs().size() == 2) {
    return insert(graph, c10::aten::to, {node->input(0), node->input(1), false, false});
  }
  if (kind == c10::aten::square && node->inputs().size() == 1) {
    return insert(graph, c10::aten::mul, {node->input(0), node->input(0)});
  }
  if (kind == c10::aten::hardtanh && node->inputs().size() == 3) {
    return insert(graph, c10::aten::clamp, {node->input(0), node->input(1), node->input(2)});
  }
  if (kind == c10::aten::relu6 && node->inputs().size() == 1) {
    return insert(graph, c10::aten::clamp, {node->input(0), 0.0, 6.0});
  }
  return nullptr;
}

}  // namespace

bool decompose_ops(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](Node* node) {
    if (node->outputs().size() != 1) return;
    Node* before = node->prev();  // the rewrite inserts between `before` and `node`
    Value* replacement = decompose(graph, node);
    if (!replacement) return;
    for (Node* n = before->next(); n != node; n = n->next()) inherit_fallback_mark(node, n);
    replacement->setType(node->output()->type());
    replace_and_destroy(node, replacement);
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
