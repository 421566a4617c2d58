// Converters of tensor factories (arange, zeros, ones, full, their _like and new_ forms) to engine
// fill layers, with torch's default dtypes: integer ranges and fills are int64, floats f32.
#include <cmath>

#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "conversion/dtypes.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::DataType;
using engine::TensorId;
using torch::jit::Node;
using torch::jit::Value;

// The dtype a python number gives when no dtype is passed (torch's default dtype is f32).
DataType dtype_of_scalar(const c10::IValue& v) {
  return v.isDouble() ? DataType::kF32 : v.isBool() ? DataType::kBool : DataType::kI64;
}

// A constant fill of `shape` (static), or of `like`'s shape when that is dynamic.
TensorId constant_fill(ConversionContext& ctx, const Node* n, DataType dtype, double value,
                       const engine::Shape& shape, std::optional<TensorId> like = {}) {
  engine::FillParams p;
  p.dtype = dtype;
  p.value = value;
  if (like && !engine::is_static(ctx.desc(*like).shape)) {
    const TensorId shape_t = ctx.add(n, engine::ShapeParams{}, {*like}, "shape");
    p.shape = ctx.desc(*like).shape;  // its static dims stay known while building
    return ctx.add(n, p, {shape_t});
  }
  p.shape = shape;
  return ctx.add(n, p, {});
}

// The fill value as a double, checking that an integer fill stays exact in the layer's double.
double fill_value(ConversionContext& ctx, const Value* v) {
  const c10::IValue& iv = ctx.ivalue(v);
  if (iv.isInt()) {
    KILN_CHECK(std::abs(iv.toInt()) <= (int64_t{1} << 53), Unsupported, "fill value ", iv.toInt(),
               " is not exact as a double");
  }
  return static_number(ctx, v);
}

// arange whose end is an int only known at run time (`torch.arange(ids.size(1))`): a range fill
// whose length, ceil((end - start) / step), the engine computes from shapes on the host.
void arange_to_run_time_end(ConversionContext& ctx, const Node* n,
                            const std::vector<const Value*>& numbers, size_t n_numbers) {
  const int64_t start = n_numbers == 1 ? 0 : static_int(ctx, numbers[0]);
  const int64_t step = n_numbers == 3 ? static_int(ctx, numbers[2]) : 1;
  KILN_CHECK(step > 0, Unsupported, "arange step ", step,
             " to an end only known at run time (kiln takes a positive step there)");
  const DataType dtype = static_dtype(ctx, n->input(n_numbers)).value_or(DataType::kI64);
  KILN_CHECK(dtype != DataType::kBool, InvalidArgument, "arange of dtype bool");
  const TensorId end = run_time_int(ctx, n, numbers[n_numbers == 1 ? 0 : 1]);
  ctx.set_tensor(n->output(), run_time_range(ctx, n, start, end, step, dtype));
}

// arange(end) / arange(start, end) / arange(start, end, step): `n_numbers` leading scalars.
ConvertFn arange(size_t n_numbers) {
  return [n_numbers](ConversionContext& ctx, const Node* n) {
    double start = 0, step = 1, end = 0;
    bool floating = false;
    std::vector<const Value*> numbers(n->inputs().begin(), n->inputs().begin() + n_numbers);
    const Value* end_value = numbers[n_numbers == 1 ? 0 : 1];
    if (!ctx.try_ivalue(end_value)) return arange_to_run_time_end(ctx, n, numbers, n_numbers);
    for (const Value* v : numbers) floating = floating || ctx.ivalue(v).isDouble();
    if (n_numbers == 1) {
      end = static_number(ctx, numbers[0]);
    } else {
      start = static_number(ctx, numbers[0]);
      end = static_number(ctx, numbers[1]);
      if (n_numbers == 3) step = static_number(ctx, numbers[2]);
    }
    KILN_CHECK(step != 0, InvalidArgument, "arange step must be nonzero");
    const double len = std::ceil((end - start) / step);
    KILN_CHECK(len >= 0, InvalidArgument, "arange(", start, ", ", end, ", ", step,
               ") has a negative length");
    const DataType dtype =
        static_dtype(ctx, n->input(n_numbers)).value_or(floating ? DataType::kF32 : DataType::kI64);
    KILN_CHECK(dtype != DataType::kBool, InvalidArgument, "arange of dtype bool");
    engine::FillParams p;
    p.mode = engine::FillMode::kRange;
    p.dtype = dtype;
    p.shape = {static_cast<int64_t>(len)};
    p.start = start;
    p.delta = step;
    ctx.set_tensor(n->output(), ctx.add(n, p, {}));
  };
}

// zeros/ones(size, dtype, ...) with a constant value.
ConvertFn constant_factory(double value) {
  return [value](ConversionContext& ctx, const Node* n) {
    const DataType dtype = static_dtype(ctx, n->input(1)).value_or(DataType::kF32);
    ctx.set_tensor(n->output(), constant_fill(ctx, n, dtype, value, static_ints(ctx, n->input(0))));
  };
}

// full(size, value, dtype, ...): without a dtype, the value's type decides (as in torch >= 1.8).
void convert_full(ConversionContext& ctx, const Node* n) {
  const DataType dtype =
      static_dtype(ctx, n->input(2)).value_or(dtype_of_scalar(ctx.ivalue(n->input(1))));
  ctx.set_tensor(n->output(), constant_fill(ctx, n, dtype, fill_value(ctx, n->input(1)),
                                            static_ints(ctx, n->input(0))));
}

// zeros_like/ones_like(self, dtype, ...) and full_like(self, value, dtype, ...): self's shape
// (also when dynamic) and, without a dtype, self's dtype.
ConvertFn like_factory(std::optional<double> value) {
  return [value](ConversionContext& ctx, const Node* n) {
    const TensorId self = ctx.tensor(n->input(0));
    const size_t dtype_at = value ? 1 : 2;
    const DataType dtype = static_dtype(ctx, n->input(dtype_at)).value_or(ctx.desc(self).dtype);
    const double v = value ? *value : fill_value(ctx, n->input(1));
    ctx.set_tensor(n->output(), constant_fill(ctx, n, dtype, v, ctx.desc(self).shape, self));
  };
}

// new_zeros/new_ones(self, size, dtype, ...) and new_full(self, size, value, dtype, ...).
ConvertFn new_factory(std::optional<double> value) {
  return [value](ConversionContext& ctx, const Node* n) {
    const TensorId self = ctx.tensor(n->input(0));
    const size_t dtype_at = value ? 2 : 3;
    const DataType dtype = static_dtype(ctx, n->input(dtype_at)).value_or(ctx.desc(self).dtype);
    const double v = value ? *value : fill_value(ctx, n->input(2));
    ctx.set_tensor(n->output(), constant_fill(ctx, n, dtype, v, static_ints(ctx, n->input(1))));
  };
}

// Every non-tensor argument (sizes, values, dtype, ...) must be known at compile time.
std::optional<std::string> arguments_static(const Node* n) {
  for (size_t i = 0; i < n->inputs().size(); ++i) {
    if (n->input(i)->type()->kind() == c10::TypeKind::TensorType) continue;
    if (auto r = not_static_reason(n->input(i))) return "argument " + std::to_string(i) + ": " + *r;
  }
  return std::nullopt;
}

std::optional<std::string> undefined_contents(const Node*) {
  return std::string("empty_like has undefined contents; nothing to convert it to");
}

}  // namespace

void register_fill_converters(Registry& r) {
  // Factories fill static sizes or another tensor's shape, dynamic included. empty_like stays
  // without: its validator refuses every node, so it converts nothing.
  r.add_converter(with_dynamic_shapes({{"aten::arange"}, arange(1), arguments_static, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::arange.start"}, arange(2), arguments_static, 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::arange.start_step"}, arange(3), arguments_static, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::zeros"}, constant_factory(0), arguments_static, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::ones"}, constant_factory(1), arguments_static, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::full"}, convert_full, arguments_static, 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::zeros_like"}, like_factory(0), arguments_static, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::ones_like"}, like_factory(1), arguments_static, 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::full_like"}, like_factory({}), arguments_static, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::new_zeros"}, new_factory(0), arguments_static, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::new_ones"}, new_factory(1), arguments_static, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::new_full"}, new_factory({}), arguments_static, 0}));
  r.add_converter(
      {{"aten::empty_like"}, [](ConversionContext&, const Node*) {}, undefined_contents, 0});
}

}  // namespace kiln::conversion
