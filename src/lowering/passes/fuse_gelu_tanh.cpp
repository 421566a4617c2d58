// The tanh GELU written out, as transformers' NewGELUActivation (GPT-2's gelu_new) and many
// hand-written models compute it,
//   y = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3))))
// becomes aten::gelu(x, approximate="tanh"), the same function: the engine then runs it as one
// activation, inside the epilogue of the GEMM before it where the library allows, instead of
// eight elementwise ops over the widest tensor of the block.
//
// Matched: the product of the two factors in either order; each mul and the inner add with its
// operands in either order; constants as Python scalars or 0-d tensors, within 1e-6 of the
// formula's; every occurrence of x the same value. The interior nodes go with dead-code
// elimination when nothing else reads them.
#include <cmath>

#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// A constant scalar (a number or a one-element tensor) as a double.
std::optional<double> scalar_constant(const Value* v) {
  const auto iv = constant_value(v);
  if (!iv) return std::nullopt;
  if (iv->isDouble()) return iv->toDouble();
  if (iv->isInt()) return static_cast<double>(iv->toInt());
  if (iv->isTensor() && iv->toTensor().numel() == 1) return iv->toTensor().item<double>();
  return std::nullopt;
}

bool near(const Value* v, double expected) {
  const auto c = scalar_constant(v);
  return c && std::abs(*c - expected) <= 1e-6 * std::abs(expected);
}

bool is_binary(const Node* n, c10::Symbol kind) {
  return n->kind() == kind && n->inputs().size() == (kind == c10::aten::add ? 3u : 2u) &&
         (kind != c10::aten::add || is_constant_one(n->input(2)));
}

// If `v` is op(x, c) or op(c, x) with c near `constant`, x; else nullptr.
Value* with_constant(Value* v, c10::Symbol kind, double constant) {
  const Node* n = v->node();
  if (!is_binary(n, kind)) return nullptr;
  if (near(n->input(1), constant)) return n->input(0);
  if (near(n->input(0), constant)) return n->input(1);
  return nullptr;
}

// The x of tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3))) + 1, or nullptr.
Value* tanh_factor_input(Value* v) {
  Value* t = with_constant(v, c10::aten::add, 1.0);
  if (!t || t->node()->kind() != c10::aten::tanh || t->node()->inputs().size() != 1) {
    return nullptr;
  }
  Value* inner = with_constant(t->node()->input(0), c10::aten::mul, std::sqrt(2.0 / M_PI));
  if (!inner || !is_binary(inner->node(), c10::aten::add)) return nullptr;
  for (size_t i = 0; i < 2; ++i) {
    Value* x = inner->node()->input(i);
    Value* cube = with_constant(inner->node()->input(1 - i), c10::aten::mul, 0.044715);
    if (!cube) continue;
    const Node* pow = cube->node();
    if (pow->kind() == c10::aten::pow && pow->inputs().size() == 2 && pow->input(0) == x &&
        near(pow->input(1), 3.0)) {
      return x;
    }
  }
  return nullptr;
}

bool fuse_block(torch::jit::Block* block) {
  bool changed = false;
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    Node* n = *it;
    ++it;
    for (torch::jit::Block* sub : n->blocks()) changed |= fuse_block(sub);
    if (!is_binary(n, c10::aten::mul)) continue;
    for (size_t i = 0; i < 2; ++i) {
      Value* x = with_constant(n->input(i), c10::aten::mul, 0.5);
      if (!x || tanh_factor_input(n->input(1 - i)) != x) continue;
      torch::jit::Graph& g = *n->owningGraph();
      torch::jit::WithInsertPoint guard(n);
      Node* gelu = g.create(c10::aten::gelu, {x, g.insertConstant(std::string("tanh"))});
      inherit_fallback_mark(n, gelu);
      g.insertNode(gelu)->output()->setType(n->output()->type());
      replace_and_destroy(n, gelu->output());
      changed = true;
      break;
    }
  }
  return changed;
}

}  // namespace

bool fuse_gelu_tanh(GraphPtr& graph) {
  return fuse_block(graph->block());
}

}  // namespace kiln::lowering
