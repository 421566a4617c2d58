// Converters of softmax and log_softmax (public and underscore forms) to engine softmax layers.
#include "conversion/converters/convolution_params.h"
#include "conversion/converters/operands.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using torch::jit::Node;

// softmax(self, dim, dtype?) casts to dtype first; _softmax(self, dim, half_to_float) computes
// f16 input in f32 when asked.
ConvertFn softmax(bool log) {
  return [log](ConversionContext& ctx, const Node* n) {
    engine::TensorId x = ctx.tensor(n->input(0));
    const c10::IValue& third = ctx.ivalue(n->input(2));
    if (third.isInt()) {
      x = ctx.cast(n, x,
                   to_engine_dtype(static_cast<at::ScalarType>(third.toInt()), "softmax dtype"));
    } else if (third.isBool() && third.toBool()) {
      x = ctx.cast(n, x, engine::DataType::kF32);
    }
    KILN_CHECK(engine::is_floating(ctx.desc(x).dtype), Unsupported, log ? "log_softmax" : "softmax",
               " of a ", engine::dtype_name(ctx.desc(x).dtype),
               " input (torch needs a floating input or dtype too)");
    engine::SoftmaxParams p;
    p.axis = ctx.ivalue(n->input(1)).toInt();
    p.log = log;
    ctx.set_tensor(n->output(), ctx.add(n, p, {x}));
  };
}

}  // namespace

void register_softmax_converters(Registry& r) {
  // Softmax reads only its axis: it takes dynamic shapes.
  const CapabilityValidator dim_and_dtype = [](const Node* n) { return require_static(n, {1, 2}); };
  r.add_converter(with_dynamic_shapes(
      {{"aten::softmax.int", "aten::_softmax"}, softmax(false), dim_and_dtype}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::log_softmax.int", "aten::_log_softmax"}, softmax(true), dim_and_dtype}));
}

}  // namespace kiln::conversion
