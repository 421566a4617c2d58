// Converters of where and masked_fill to engine select layers (broadcasting, torch's type
// promotion for where; masked_fill keeps self's dtype).
#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::DataType;
using engine::TensorId;
using torch::jit::Node;

TensorId condition(ConversionContext& ctx, const Node* n, const torch::jit::Value* v) {
  return ctx.cast(n, ctx.tensor(v, DataType::kBool), DataType::kBool);
}

// where(condition, self, other), with self and other tensors or scalars.
void convert_where(ConversionContext& ctx, const Node* n) {
  const TensorId cond = condition(ctx, n, n->input(0));
  const BinaryOperands o = binary_operands(ctx, n, n->input(1), n->input(2));
  ctx.set_tensor(n->output(), ctx.add(n, engine::SelectParams{}, {cond, o.a, o.b}));
}

// masked_fill(self, mask, value): value (a scalar or 0-d tensor) in self's dtype where mask.
void convert_masked_fill(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const DataType dt = ctx.desc(x).dtype;
  const TensorId mask = condition(ctx, n, n->input(1));
  const TensorId value = ctx.cast(n, ctx.tensor(n->input(2), dt), dt);
  KILN_CHECK(ctx.desc(value).shape.empty(), InvalidArgument,
             "masked_fill value must be a 0-d tensor, got shape ",
             engine::shape_to_string(ctx.desc(value).shape));
  ctx.set_tensor(n->output(), ctx.add(n, engine::SelectParams{}, {mask, value, x}));
}

// Scalar operands (where.ScalarOther/ScalarSelf/Scalar) must be known at compile time.
std::optional<std::string> scalars_static(const Node* n) {
  for (size_t i = 1; i < n->inputs().size(); ++i) {
    if (n->input(i)->type()->kind() == c10::TypeKind::TensorType) continue;
    if (auto r = not_static_reason(n->input(i))) return "scalar operand " + *r;
  }
  return std::nullopt;
}

}  // namespace

void register_select_converters(Registry& r) {
  // Selects read no dims: each takes dynamic shapes.
  r.add_converter(
      with_dynamic_shapes({existing_schemas({"aten::where.self", "aten::where.ScalarOther",
                                             "aten::where.ScalarSelf", "aten::where.Scalar"}),
                           convert_where, scalars_static, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::masked_fill.Scalar", "aten::masked_fill_.Scalar"},
                                       convert_masked_fill,
                                       scalars_static,
                                       0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::masked_fill.Tensor", "aten::masked_fill_.Tensor"}, convert_masked_fill, {}, 0}));
}

}  // namespace kiln::conversion
