// Converters of dtype casts (aten::to overloads, type_as) to engine cast layers. Device moves are
// no-ops: an engine runs on one device. f64 targets become f32, the engine's widest float (as
// for f64 weights, see dtypes.h); int64 stays int64.
#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "conversion/dtypes.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using torch::jit::Node;

// The dtype argument at `index` must be static and have an engine counterpart.
CapabilityValidator dtype_arg(size_t index) {
  return [index](const Node* n) -> std::optional<std::string> {
    if (index >= n->inputs().size() || is_none(n->input(index))) return std::nullopt;
    if (auto r = static_inputs({index})(n)) return r;
    if (auto v = torch::jit::toIValue(n->input(index)); v && v->isInt()) {
      try {
        to_engine_dtype(static_cast<at::ScalarType>(v->toInt()), "cast target");
      } catch (const Error& e) {
        return e.message();
      }
    }
    return std::nullopt;
  };
}

// Casts input 0 to the dtype at argument `index` (None: unchanged).
ConvertFn cast_to_arg(size_t index) {
  return [index](ConversionContext& ctx, const Node* n) {
    const auto x = ctx.tensor(n->input(0));
    const auto dtype = static_dtype(ctx, n->input(index));
    ctx.set_tensor(n->output(), dtype ? ctx.cast(n, x, *dtype) : x);
  };
}

// Casts input 0 to the dtype of the tensor input 1.
void cast_like(ConversionContext& ctx, const Node* n) {
  const auto x = ctx.tensor(n->input(0));
  ctx.set_tensor(n->output(), ctx.cast(n, x, ctx.desc(ctx.tensor(n->input(1))).dtype));
}

void identity(ConversionContext& ctx, const Node* n) {
  ctx.set_tensor(n->output(), ctx.tensor(n->input(0)));
}

}  // namespace

void register_cast_converters(Registry& r) {
  // Casts read no dims: each takes dynamic shapes.
  r.add_converter(with_dynamic_shapes({{"aten::to.dtype"}, cast_to_arg(1), dtype_arg(1), 0}));
  r.add_converter(with_dynamic_shapes({{"aten::to.device"}, cast_to_arg(2), dtype_arg(2), 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::to.dtype_layout"}, cast_to_arg(1), dtype_arg(1), 0}));
  r.add_converter(with_dynamic_shapes(
      {existing_schemas({"aten::to.prim_Device"}), cast_to_arg(2), dtype_arg(2)}));
  r.add_converter(with_dynamic_shapes(
      {existing_schemas({"aten::to.prim_dtype"}), cast_to_arg(1), dtype_arg(1)}));
  r.add_converter(with_dynamic_shapes({existing_schemas({"aten::to.prim_other"}), identity}));
  r.add_converter(with_dynamic_shapes({{"aten::to.other", "aten::type_as"}, cast_like, {}, 0}));
}

}  // namespace kiln::conversion
