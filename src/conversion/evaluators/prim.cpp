// Evaluators of prim:: nodes: constants, lists, tuples and their unpacking.
#include "conversion/context.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using torch::jit::Node;

std::optional<std::vector<c10::IValue>> static_inputs(ConversionContext& ctx, const Node* n) {
  std::vector<c10::IValue> values;
  for (const torch::jit::Value* in : n->inputs()) {
    auto v = ctx.try_ivalue(in);
    if (!v) return std::nullopt;
    values.push_back(*v);
  }
  return values;
}

std::optional<c10::IValue> evaluate_constant(ConversionContext&, const Node* n) {
  return torch::jit::toIValue(n->output());
}

std::optional<c10::IValue> evaluate_list_construct(ConversionContext& ctx, const Node* n) {
  auto values = static_inputs(ctx, n);
  if (!values) return std::nullopt;
  const auto list_type = n->output()->type()->cast<c10::ListType>();
  c10::impl::GenericList list(list_type ? list_type->getElementType() : c10::AnyType::get());
  for (auto& v : *values) list.push_back(v);
  return c10::IValue(list);
}

std::optional<c10::IValue> evaluate_tuple_construct(ConversionContext& ctx, const Node* n) {
  auto values = static_inputs(ctx, n);
  if (!values) return std::nullopt;
  return c10::IValue(c10::ivalue::Tuple::create(std::move(*values)));
}

// Unpacks return a tuple of their outputs (the context spreads it over the outputs).
std::optional<c10::IValue> evaluate_unpack(ConversionContext& ctx, const Node* n) {
  auto v = ctx.try_ivalue(n->input(0));
  if (!v) return std::nullopt;
  std::vector<c10::IValue> items =
      v->isTuple() ? v->toTupleRef().elements().vec() : v->toListRef().vec();
  KILN_CHECK(items.size() == n->outputs().size(), InvalidArgument, "unpacking ", items.size(),
             " values into ", n->outputs().size(), " outputs");
  return c10::IValue(c10::ivalue::Tuple::create(std::move(items)));
}

std::optional<c10::IValue> evaluate_tuple_index(ConversionContext& ctx, const Node* n) {
  auto t = ctx.try_ivalue(n->input(0));
  auto i = ctx.try_ivalue(n->input(1));
  if (!t || !i) return std::nullopt;
  const auto& items = t->toTupleRef().elements();
  int64_t idx = i->toInt();
  if (idx < 0) idx += static_cast<int64_t>(items.size());
  KILN_CHECK(idx >= 0 && idx < static_cast<int64_t>(items.size()), InvalidArgument, "tuple index ",
             i->toInt(), " out of range for ", items.size(), " elements");
  return items[static_cast<size_t>(idx)];
}

std::optional<c10::IValue> evaluate_passthrough(ConversionContext& ctx, const Node* n) {
  return ctx.try_ivalue(n->input(0));
}

}  // namespace

void register_prim_evaluators(Registry& r) {
  r.add_evaluator({{"prim::Constant"}, evaluate_constant});
  r.add_evaluator({{"prim::ListConstruct"}, evaluate_list_construct});
  r.add_evaluator({{"prim::TupleConstruct"}, evaluate_tuple_construct});
  r.add_evaluator({{"prim::ListUnpack", "prim::TupleUnpack"}, evaluate_unpack});
  r.add_evaluator({{"prim::TupleIndex"}, evaluate_tuple_index});
  r.add_evaluator({{"prim::unchecked_cast"}, evaluate_passthrough});
}

}  // namespace kiln::conversion
