// Decompositions: composite ops rewritten into ops the engine has layers for (seed 001).
//
// Per op, the choice:
// - decomposed: var/std (the engine has no variance reduce: mean, sub, mul, sum, div[, sqrt]);
//   type_as (aten::to with `other`: one cast converter); square (mul); hardtanh and relu6
//   (clamp, which is an engine activation); the math of decompose_math (acosh, atan2, fmod,
//   logaddexp, addcmul, lerp, mv, outer, logsumexp, isnan/isinf/isfinite, ...); the `_copy`
//   variants of views (the view, when the copy is not written in place).
// - kept whole, because the engine runs them natively and one fused activation beats its
//   pieces: relu, sigmoid, tanh, gelu, silu, hardswish, hardsigmoid, leaky_relu, elu, softplus,
//   mish, selu, clamp (activation layer); rsqrt (unary layer); remainder (binary kMod).
#include <limits>

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

Value* call(GraphPtr& graph, const char* name, std::vector<torch::jit::NamedValue> args) {
  return graph->insert(c10::Symbol::fromQualString(name), args);
}

constexpr double kPi = 3.14159265358979323846;
constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLn10 = 2.30258509299404568402;
const double kInf = std::numeric_limits<double>::infinity();

// Whether some user of `v` writes to it in place, or takes it as an alias (a view of it that
// might be written later): then a copy cannot become a view.
bool written_in_place(const Value* v) {
  for (const torch::jit::Use& u : v->uses()) {
    const c10::FunctionSchema* schema = u.user->maybeSchema();
    if (!schema) {  // prim:: nodes (return, list and tuple constructs) write nothing
      if (u.user->kind().is_prim()) continue;
      return true;  // other unknown users: assume the worst
    }
    if (u.offset < schema->arguments().size()) {
      if (schema->arguments()[u.offset].alias_info()) return true;
    }
  }
  return false;
}

// Math that the engine computes from ops it has (issue #35's coverage): elementwise identities,
// products of vectors and matrices, logsumexp. Inside the insert point of `node`; nullptr when
// the overload or its constant arguments are not the ones handled.
Value* decompose_math(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return nullptr;
  const std::string name = schema->name(), overload = schema->overload_name();
  const auto in = [&](size_t i) { return node->input(i); };
  const size_t n = node->inputs().size();
  auto g = [&](const char* op, std::vector<torch::jit::NamedValue> args) {
    return call(graph, op, std::move(args));
  };
  if (n == 1 && overload.empty()) {
    Value* x = in(0);
    if (name == "aten::acosh") {
      return g(
          "aten::log",
          {g("aten::add", {x, g("aten::sqrt", {g("aten::sub", {g("aten::mul", {x, x}), 1})})})});
    }
    if (name == "aten::asinh") {
      Value* a = g("aten::abs", {x});
      Value* r =
          g("aten::log",
            {g("aten::add", {a, g("aten::sqrt", {g("aten::add", {g("aten::mul", {a, a}), 1})})})});
      return g("aten::mul", {g("aten::sign", {x}), r});
    }
    if (name == "aten::atanh") {
      return g(
          "aten::mul",
          {g("aten::sub", {g("aten::log1p", {x}), g("aten::log1p", {g("aten::neg", {x})})}), 0.5});
    }
    if (name == "aten::erfc") return g("aten::rsub", {g("aten::erf", {x}), 1});
    if (name == "aten::exp2") return g("aten::exp", {g("aten::mul", {x, kLn2})});
    if (name == "aten::log10") return g("aten::mul", {g("aten::log", {x}), 1.0 / kLn10});
    if (name == "aten::deg2rad") return g("aten::mul", {x, kPi / 180});
    if (name == "aten::rad2deg") return g("aten::mul", {x, 180 / kPi});
    if (name == "aten::frac") return g("aten::sub", {x, g("aten::trunc", {x})});
    if (name == "aten::isnan") return g("aten::ne", {x, x});
    if (name == "aten::isinf") return g("aten::eq", {g("aten::abs", {x}), kInf});
    if (name == "aten::isposinf") return g("aten::eq", {x, kInf});
    if (name == "aten::isneginf") return g("aten::eq", {x, -kInf});
    // inf * 0 and nan * 0 are nan; integers and bools are always finite.
    if (name == "aten::isfinite") return g("aten::eq", {g("aten::mul", {x, 0}), 0});
    if (name == "aten::log_sigmoid") {
      return g("aten::neg", {g("aten::softplus", {g("aten::neg", {x}), 1, 20})});
    }
    if (name == "aten::mT" || name == "aten::mH" || name == "aten::adjoint") {
      return g("aten::transpose", {x, -2, -1});
    }
    if (name == "aten::matrix_H") return g("aten::transpose", {x, 0, 1});
    if (name == "aten::dot" || name == "aten::vdot") return nullptr;  // two inputs, below
  }
  if (name == "aten::logit" && n == 2) {
    auto eps = constant_value(in(1));
    if (!eps) return nullptr;
    Value* x = in(0);
    if (!eps->isNone()) x = g("aten::clamp", {x, eps->toDouble(), 1 - eps->toDouble()});
    return g("aten::log", {g("aten::div", {x, g("aten::rsub", {x, 1})})});
  }
  if (name == "aten::celu" && n == 2) {
    auto alpha = constant_value(in(1));
    if (!alpha || !(alpha->isDouble() || alpha->isInt())) return nullptr;
    const double a = alpha->toScalar().toDouble();
    if (a == 0) return nullptr;
    Value* neg = g("aten::mul", {g("aten::expm1", {g("aten::div", {in(0), a})}), a});
    return g("aten::where", {g("aten::gt", {in(0), 0}), in(0), neg});
  }
  if (n == 2 && (overload.empty() || overload == "Tensor" || overload == "Scalar")) {
    Value* a = in(0);
    Value* b = in(1);
    if (name == "aten::atan2") {  // a = y, b = x
      Value* q = g("aten::atan", {g("aten::div", {a, b})});
      Value* left = g("aten::where",
                      {g("aten::lt", {a, 0}), g("aten::sub", {q, kPi}), g("aten::add", {q, kPi})});
      Value* r = g("aten::where", {g("aten::lt", {b, 0}), left, q});
      // x = +-0: +-pi/2 by y's sign (y / -0 would flip it), 0 at the origin. (torch's pi at
      // y = +0, x = -0 is not kept.)
      return g("aten::where",
               {g("aten::eq", {b, 0}), g("aten::mul", {g("aten::sign", {a}), kPi / 2}), r});
    }
    if (name == "aten::hypot") {
      return g("aten::sqrt", {g("aten::add", {g("aten::mul", {a, a}), g("aten::mul", {b, b})})});
    }
    if (name == "aten::fmod" && overload == "Scalar") {  // a constant, nonzero divisor
      auto divisor = constant_value(b);
      if (!divisor || !divisor->isScalar() || divisor->toScalar().toDouble() == 0) return nullptr;
      Value* q = graph->insert(c10::aten::div, {a, b},
                               {torch::jit::NamedValue("rounding_mode", std::string("trunc"))});
      return g("aten::sub", {a, g("aten::mul", {q, b})});
    }
    if (name == "aten::fmax" || name == "aten::fmin") {
      Value* m = g(name == "aten::fmax" ? "aten::maximum" : "aten::minimum", {a, b});
      return g("aten::where",
               {g("aten::ne", {a, a}), b, g("aten::where", {g("aten::ne", {b, b}), a, m})});
    }
    if (name == "aten::logaddexp" || name == "aten::logaddexp2") {
      const bool two = name == "aten::logaddexp2";
      Value* m = g("aten::maximum", {a, b});
      Value* d = g("aten::neg", {g("aten::abs", {g("aten::sub", {a, b})})});
      if (two) d = g("aten::mul", {d, kLn2});
      Value* tail = g("aten::log1p", {g("aten::exp", {d})});
      if (two) tail = g("aten::mul", {tail, 1 / kLn2});
      // Equal arguments (infinities too): a + log(2) (or + 1 in base 2).
      return g("aten::where", {g("aten::eq", {a, b}), g("aten::add", {a, two ? 1.0 : kLn2}),
                               g("aten::add", {m, tail})});
    }
    if (name == "aten::xlogy" && overload == "Tensor") {
      Value* r =
          g("aten::where", {g("aten::eq", {a, 0}), 0.0, g("aten::mul", {a, g("aten::log", {b})})});
      return g("aten::where", {g("aten::ne", {b, b}), b, r});
    }
    if (name == "aten::clamp_min" && overload == "Tensor") return g("aten::maximum", {a, b});
    if (name == "aten::clamp_max" && overload == "Tensor") return g("aten::minimum", {a, b});
    if (name == "aten::dot" || name == "aten::vdot") {
      return g("aten::sum", {g("aten::mul", {a, b})});
    }
    // mul and sum, exact for integers too (the engine's matrix products take floats).
    if (name == "aten::mv") return g("aten::sum", {g("aten::mul", {a, b}), -1});
    if (name == "aten::outer" || name == "aten::ger") {
      return g("aten::mul", {g("aten::unsqueeze", {a, 1}), b});
    }
    if (name == "aten::broadcast_to") return g("aten::expand", {a, b});
  }
  if (name == "aten::clamp" && overload == "Tensor" && n == 3) {
    Value* r = in(0);
    if (!constant_value(in(1)) || !constant_value(in(1))->isNone()) {
      r = g("aten::maximum", {r, in(1)});
    }
    if (!constant_value(in(2)) || !constant_value(in(2))->isNone()) {
      r = g("aten::minimum", {r, in(2)});
    }
    return r;
  }
  if ((name == "aten::addcmul" || name == "aten::addcdiv") && n == 4) {
    Value* t = g(name == "aten::addcmul" ? "aten::mul" : "aten::div", {in(1), in(2)});
    return g("aten::add", {in(0), g("aten::mul", {t, in(3)})});
  }
  if (name == "aten::lerp" && n == 3) {  // start + weight * (end - start)
    return g("aten::add", {in(0), g("aten::mul", {g("aten::sub", {in(1), in(0)}), in(2)})});
  }
  if ((name == "aten::addmv" || name == "aten::addr") && n == 5) {
    auto beta = constant_value(in(3));
    auto alpha = constant_value(in(4));
    if (!beta || !alpha || !beta->isScalar() || !alpha->isScalar()) return nullptr;
    Value* product = name == "aten::addmv"
                         ? g("aten::sum", {g("aten::mul", {in(1), in(2)}), -1})
                         : g("aten::mul", {g("aten::unsqueeze", {in(1), 1}), in(2)});
    if (alpha->toScalar().toDouble() != 1) product = g("aten::mul", {product, in(4)});
    // beta = 0 ignores self, nan and inf included.
    if (beta->toScalar().toDouble() == 0)
      return g("aten::add", {g("aten::mul", {in(0), 0}), product});
    return g("aten::add", {g("aten::mul", {in(0), in(3)}), product});
  }
  if (name == "aten::logsumexp" && n == 3) {
    auto dims = constant_value(in(1));
    auto keep = constant_value(in(2));
    if (!dims || !keep || !dims->isIntList() || dims->toIntVector().empty() || !keep->isBool()) {
      return nullptr;
    }
    Value* m = g("aten::amax", {in(0), in(1), true});
    // A slice all -inf (or with +inf) has no finite max to shift by: shift by 0 there.
    m = g("aten::where", {g("aten::eq", {g("aten::abs", {m}), kInf}), 0.0, m});
    Value* sum = g("aten::sum", {g("aten::exp", {g("aten::sub", {in(0), m})}), in(1), true});
    Value* r = g("aten::add", {g("aten::log", {sum}), m});
    // Without keepdim, the reduced dims (now of size 1) go: a sum over them drops them.
    return keep->toBool() ? r : g("aten::sum", {r, in(1), false});
  }
  return nullptr;
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
  // The functional copies of views (`view_copy`, `permute_copy`, ...): the view itself, unless
  // the copy is written in place later.
  const std::string qualified = kind.toQualString();
  const size_t copy = qualified.rfind("_copy");
  if (copy != std::string::npos && copy + 5 == qualified.size() && node->maybeSchema() &&
      !written_in_place(node->output())) {
    const std::string base =
        qualified.substr(0, copy) == "aten::alias" ? "aten::clone" : qualified.substr(0, copy);
    std::vector<torch::jit::NamedValue> args, kwargs;
    const auto& params = node->schema().arguments();
    for (size_t i = 0; i < node->inputs().size() && i < params.size(); ++i) {
      if (params[i].kwarg_only()) {
        kwargs.emplace_back(params[i].name(), node->input(i));
      } else {
        args.emplace_back(node->input(i));
      }
    }
    try {
      return graph->insert(c10::Symbol::fromQualString(base), args, kwargs);
    } catch (const std::exception&) {
      return nullptr;  // no view op of that name takes these arguments
    }
  }
  return decompose_math(graph, node);
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
