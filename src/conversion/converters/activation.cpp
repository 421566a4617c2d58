// Converters of activations (relu, sigmoid, gelu, clamp and friends) to engine activation layers.
#include <cmath>
#include <limits>

#include "conversion/converters/operands.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::ActivationKind;
using torch::jit::Node;

// Checks that inputs [from, end) are constants, so the layer's parameters are known.
CapabilityValidator static_params(size_t from) {
  return [from](const Node* n) -> std::optional<std::string> {
    for (size_t i = from; i < n->inputs().size(); ++i) {
      if (!torch::jit::toIValue(n->input(i))) {
        return "parameter " + std::to_string(i) + " (%" + n->input(i)->debugName() +
               ") must be a constant";
      }
    }
    return std::nullopt;
  };
}

std::optional<std::string> floating_or_static(const Node* n) {
  return static_params(1)(n);
}

engine::TensorId floating_input(ConversionContext& ctx, const Node* n) {
  auto x = ctx.tensor(n->input(0));
  return engine::is_floating(ctx.desc(x).dtype) ? x : ctx.cast(n, x, engine::DataType::kF32);
}

ConvertFn activation(
    ActivationKind kind,
    std::function<std::pair<double, double>(ConversionContext&, const Node*)> params = {}) {
  return [kind, params](ConversionContext& ctx, const Node* n) {
    auto [alpha, beta] = params ? params(ctx, n) : std::pair<double, double>{0, 0};
    ctx.set_tensor(n->output(), ctx.add(n, engine::ActivationParams{kind, alpha, beta},
                                        {floating_input(ctx, n)}));
  };
}

// relu keeps integer dtypes (torch's relu of an i64 tensor is i64): max(x, 0) there.
void convert_relu(ConversionContext& ctx, const Node* n) {
  const auto x = ctx.tensor(n->input(0));
  const auto dtype = ctx.desc(x).dtype;
  if (engine::is_floating(dtype)) {
    ctx.set_tensor(n->output(), ctx.add(n, engine::ActivationParams{ActivationKind::kRelu}, {x}));
    return;
  }
  const auto zero = ctx.constant(at::scalar_tensor(0, to_scalar_type(dtype)), "zero");
  ctx.set_tensor(n->output(),
                 ctx.add(n, engine::ElementwiseParams{engine::BinaryOp::kMax}, {x, zero}));
}

void convert_gelu(ConversionContext& ctx, const Node* n) {
  std::string approximate = "none";
  if (n->inputs().size() > 1) approximate = ctx.ivalue(n->input(1)).toStringRef();
  KILN_CHECK(approximate == "none" || approximate == "tanh", InvalidArgument, "gelu approximate=`",
             approximate, "`");
  const auto kind = approximate == "tanh" ? ActivationKind::kGeluTanh : ActivationKind::kGelu;
  ctx.set_tensor(n->output(), ctx.add(n, engine::ActivationParams{kind}, {floating_input(ctx, n)}));
}

std::optional<std::string> elu_is_plain(const Node* n) {
  if (auto r = static_params(1)(n)) return r;
  const double scale = torch::jit::toIValue(n->input(2))->toScalar().toDouble();
  const double input_scale = torch::jit::toIValue(n->input(3))->toScalar().toDouble();
  if (scale != 1.0 || input_scale != 1.0)
    return std::string("elu with scale != 1 or input_scale != 1");
  return std::nullopt;
}

// clamp(min?, max?): floats use the clamp activation; integers use max/min layers so that
// integer values stay exact.
void convert_clamp(ConversionContext& ctx, const Node* n, const torch::jit::Value* lo,
                   const torch::jit::Value* hi) {
  auto x = ctx.tensor(n->input(0));
  const auto dtype = ctx.desc(x).dtype;
  if (engine::is_floating(dtype)) {
    const double inf = std::numeric_limits<double>::infinity();
    const double a = is_none(lo) ? -inf : static_number(ctx, lo);
    const double b = is_none(hi) ? inf : static_number(ctx, hi);
    ctx.set_tensor(n->output(),
                   ctx.add(n, engine::ActivationParams{ActivationKind::kClamp, a, b}, {x}));
    return;
  }
  if (!is_none(lo)) {
    x = ctx.add(n, engine::ElementwiseParams{engine::BinaryOp::kMax}, {x, ctx.tensor(lo, dtype)},
                "min");
  }
  if (!is_none(hi)) {
    x = ctx.add(n, engine::ElementwiseParams{engine::BinaryOp::kMin}, {x, ctx.tensor(hi, dtype)},
                "max");
  }
  ctx.set_tensor(n->output(), x);
}

std::pair<double, double> slope(ConversionContext& ctx, const Node* n) {
  return {n->inputs().size() > 1 ? static_number(ctx, n->input(1)) : 0.01, 0};
}

}  // namespace

void register_activation_converters(Registry& r) {
  // Activations read no dims: each takes dynamic shapes.
  r.add_converter(with_dynamic_shapes({{"aten::relu", "aten::relu_"}, convert_relu}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::sigmoid", "aten::sigmoid_"}, activation(ActivationKind::kSigmoid)}));
  r.add_converter(
      with_dynamic_shapes({{"aten::tanh", "aten::tanh_"}, activation(ActivationKind::kTanh)}));
  r.add_converter(
      with_dynamic_shapes({{"aten::silu", "aten::silu_"}, activation(ActivationKind::kSilu)}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::hardswish", "aten::hardswish_"}, activation(ActivationKind::kHardSwish)}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::hardsigmoid", "aten::hardsigmoid_"}, activation(ActivationKind::kHardSigmoid)}));
  r.add_converter(
      with_dynamic_shapes({{"aten::mish", "aten::mish_"}, activation(ActivationKind::kMish)}));
  r.add_converter(
      with_dynamic_shapes({{"aten::selu", "aten::selu_"}, activation(ActivationKind::kSelu)}));
  r.add_converter(with_dynamic_shapes({{"aten::gelu"}, convert_gelu, floating_or_static}));
  r.add_converter(with_dynamic_shapes({{"aten::leaky_relu", "aten::leaky_relu_"},
                                       activation(ActivationKind::kLeakyRelu, slope),
                                       static_params(1)}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::elu", "aten::elu_"},
       activation(ActivationKind::kElu,
                  [](ConversionContext& ctx, const Node* n) {
                    return std::pair<double, double>{static_number(ctx, n->input(1)), 0};
                  }),
       elu_is_plain}));
  r.add_converter(with_dynamic_shapes({{"aten::softplus"},
                                       activation(ActivationKind::kSoftplus,
                                                  [](ConversionContext& ctx, const Node* n) {
                                                    return std::pair<double, double>{
                                                        static_number(ctx, n->input(1)),
                                                        static_number(ctx, n->input(2))};
                                                  }),
                                       static_params(1)}));
  r.add_converter(with_dynamic_shapes({{"aten::hardtanh", "aten::hardtanh_"},
                                       [](ConversionContext& ctx, const Node* n) {
                                         convert_clamp(ctx, n, n->input(1), n->input(2));
                                       },
                                       static_params(1)}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::relu6", "aten::relu6_"}, [](ConversionContext& ctx, const Node* n) {
         auto x = floating_input(ctx, n);
         ctx.set_tensor(n->output(),
                        ctx.add(n, engine::ActivationParams{ActivationKind::kClamp, 0, 6}, {x}));
       }}));
  r.add_converter(with_dynamic_shapes({{"aten::clamp", "aten::clamp_"},
                                       [](ConversionContext& ctx, const Node* n) {
                                         convert_clamp(ctx, n, n->input(1), n->input(2));
                                       },
                                       static_params(1)}));
}

}  // namespace kiln::conversion
