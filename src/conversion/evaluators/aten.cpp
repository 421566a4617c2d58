// Evaluators of static aten values: tensor metadata (size, dim, numel, dtype) from engine
// tensor descriptors, and scalar arithmetic run through torch's own operators.
#include <torch/csrc/jit/runtime/operator.h>

#include "conversion/context.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using torch::jit::Node;

// The shape of a tensor input: from its engine descriptor, or from a static tensor.
std::optional<engine::Shape> shape_of(ConversionContext& ctx, const torch::jit::Value* v) {
  if (ctx.has_tensor(v)) return ctx.desc(ctx.tensor(v)).shape;
  auto iv = ctx.try_ivalue(v);
  if (iv && iv->isTensor()) return iv->toTensor().sizes().vec();
  return std::nullopt;
}

std::optional<c10::IValue> evaluate_size(ConversionContext& ctx, const Node* n) {
  auto shape = shape_of(ctx, n->input(0));
  if (!shape) return std::nullopt;
  if (n->inputs().size() == 1) {
    if (!engine::is_static(*shape)) return std::nullopt;  // dynamic sizes need shape tensors
    return c10::IValue(*shape);
  }
  auto dim = ctx.try_ivalue(n->input(1));
  if (!dim) return std::nullopt;
  const int axis = engine::normalize_axis(dim->toInt(), shape->size(), "aten::size");
  const int64_t d = (*shape)[static_cast<size_t>(axis)];
  if (d == engine::kDynamic) return std::nullopt;
  return c10::IValue(d);
}

std::optional<c10::IValue> evaluate_dim(ConversionContext& ctx, const Node* n) {
  auto shape = shape_of(ctx, n->input(0));
  if (!shape) return std::nullopt;
  return c10::IValue(static_cast<int64_t>(shape->size()));
}

std::optional<c10::IValue> evaluate_numel(ConversionContext& ctx, const Node* n) {
  auto shape = shape_of(ctx, n->input(0));
  if (!shape || !engine::is_static(*shape)) return std::nullopt;
  return c10::IValue(engine::volume(*shape));
}

std::optional<c10::IValue> evaluate_dtype(ConversionContext& ctx, const Node* n) {
  const torch::jit::Value* v = n->input(0);
  if (ctx.has_tensor(v)) {
    return c10::IValue(static_cast<int64_t>(to_scalar_type(ctx.desc(ctx.tensor(v)).dtype)));
  }
  auto iv = ctx.try_ivalue(v);
  if (iv && iv->isTensor()) return c10::IValue(static_cast<int64_t>(iv->toTensor().scalar_type()));
  return std::nullopt;
}

// Any operator whose inputs are all static and whose outputs are not tensors: run torch's
// implementation on the values (int/float/bool arithmetic, comparisons, len, __getitem__, ...).
std::optional<c10::IValue> evaluate_with_torch(ConversionContext& ctx, const Node* n) {
  torch::jit::Stack stack;
  for (const torch::jit::Value* in : n->inputs()) {
    auto v = ctx.try_ivalue(in);
    if (!v) return std::nullopt;
    stack.push_back(*v);
  }
  torch::jit::Operation op = n->getOperation();  // operator() is non-const
  op(stack);
  KILN_CHECK(stack.size() == n->outputs().size(), InternalError, "operator ",
             n->kind().toQualString(), " left ", stack.size(), " values for ", n->outputs().size(),
             " outputs");
  if (stack.size() == 1) return stack[0];
  return c10::IValue(c10::ivalue::Tuple::create(std::move(stack)));
}

}  // namespace

void register_aten_evaluators(Registry& r) {
  r.add_evaluator({{"aten::size.int", "aten::size"}, evaluate_size});
  r.add_evaluator({{"aten::dim"}, evaluate_dim});
  r.add_evaluator({{"aten::numel"}, evaluate_numel});
  r.add_evaluator({{"prim::dtype"}, evaluate_dtype});
  r.add_evaluator({{"aten::add.int",       "aten::sub.int",
                    "aten::mul.int",       "aten::floordiv.int",
                    "aten::div.int",       "aten::remainder.int",
                    "aten::neg.int",       "aten::pow.int",
                    "aten::add.float",     "aten::sub.float",
                    "aten::mul.float",     "aten::div.float",
                    "aten::neg.float",     "aten::add.int_float",
                    "aten::mul.int_float", "aten::mul.float_int",
                    "aten::div",           "aten::floordiv.float",
                    "aten::eq.int",        "aten::ne.int",
                    "aten::lt.int",        "aten::gt.int",
                    "aten::le.int",        "aten::ge.int",
                    "aten::eq.float",      "aten::ne.float",
                    "aten::lt.float",      "aten::gt.float",
                    "aten::le.float",      "aten::ge.float",
                    "aten::eq.bool",       "aten::ne.bool",
                    "aten::__and__.bool",  "aten::__or__.bool",
                    "aten::__not__",       "aten::Int.float",
                    "aten::Int.Scalar",    "aten::Int.bool",
                    "aten::Float.int",     "aten::Float.Scalar",
                    "aten::Bool.int",      "aten::ScalarImplicit",
                    "aten::len.t",         "aten::__getitem__.t",
                    "aten::slice.t",       "aten::list.t",
                    "aten::__is__",        "aten::__isnot__",
                    "prim::max.int",       "prim::min.int",
                    "prim::max.self_int",  "prim::min.self_int",
                    "aten::floor.float",   "aten::ceil.float",
                    "aten::sqrt.int",      "aten::sqrt.float",
                    "aten::eq.str",        "aten::ne.str",
                    "prim::device",        "aten::Int.Tensor",
                    "aten::Float.Tensor",  "prim::NumToTensor.Scalar",
                    "aten::format"},
                   evaluate_with_torch});
}

}  // namespace kiln::conversion
