// Converters of the normalization family (batch_norm in inference form, layer_norm, group_norm,
// instance_norm, rms_norm) to engine normalization layers.
#include <limits>

#include "conversion/converters/convolution_params.h"
#include "conversion/converters/operands.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::NormalizationKind;
using torch::jit::Node;
using torch::jit::Value;

engine::TensorId floating_input(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = ctx.tensor(n->input(0));
  KILN_CHECK(engine::is_floating(ctx.desc(x).dtype), Unsupported, "normalization of a ",
             engine::dtype_name(ctx.desc(x).dtype), " input (torch needs floating inputs too)");
  return x;
}

// The channel count of x (dim 1), which must be static to build ones/zeros for a missing
// weight or bias.
int64_t static_channels(ConversionContext& ctx, engine::TensorId x) {
  const engine::Shape& s = ctx.desc(x).shape;
  KILN_CHECK(s.size() >= 2 && s[1] != engine::kDynamic, Unsupported, "input of shape ",
             engine::shape_to_string(s),
             " needs a static channel dim when only one of weight and bias is given");
  return s[1];
}

// Appends scale and bias when at least one is given (ones/zeros of `shape` stand in for the
// other), and returns whether the layer is affine.
bool affine_inputs(ConversionContext& ctx, const Node* n, const Value* weight, const Value* bias,
                   const std::function<std::vector<int64_t>()>& shape,
                   std::vector<engine::TensorId>& inputs) {
  if (is_none(weight) && is_none(bias)) return false;
  inputs.push_back(is_none(weight) ? ctx.constant(at::ones(shape()), ctx.unique_name(n, "ones"))
                                   : ctx.tensor(weight));
  inputs.push_back(is_none(bias) ? ctx.constant(at::zeros(shape()), ctx.unique_name(n, "zeros"))
                                 : ctx.tensor(bias));
  return true;
}

// batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps, cudnn)
void convert_batch_norm(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = floating_input(ctx, n);
  const engine::TensorId mean = ctx.tensor(n->input(3));
  const engine::TensorId var = ctx.tensor(n->input(4));
  engine::NormalizationParams p;
  p.kind = NormalizationKind::kBatch;
  p.epsilon = static_number(ctx, n->input(7));
  std::vector<engine::TensorId> inputs = {x};
  p.has_affine = affine_inputs(
      ctx, n, n->input(1), n->input(2),
      [&] {
        const engine::Shape& s = ctx.desc(mean).shape;
        KILN_CHECK(engine::is_static(s), Unsupported, "running_mean of shape ",
                   engine::shape_to_string(s),
                   " needs static dims when only one of weight and bias is given");
        return s;
      },
      inputs);
  inputs.push_back(mean);
  inputs.push_back(var);
  ctx.set_tensor(n->output(), ctx.add(n, p, inputs));
}

std::optional<std::string> batch_norm_inference(const Node* n) {
  if (auto r = require_static(n, {5, 7})) return r;
  if (torch::jit::toIValue(n->input(5))->toBool()) {
    return std::string("training=True batch_norm (batch statistics) is not supported; ") +
           "call model.eval() before compiling";
  }
  if (is_none(n->input(3)) || is_none(n->input(4))) {
    return std::string("batch_norm without running_mean/running_var");
  }
  return std::nullopt;
}

// The normalized_shape (input 1) of layer_norm and rms_norm: x's last dims.
std::vector<int64_t> normalized_shape(ConversionContext& ctx, const Node* n, engine::TensorId x) {
  const std::vector<int64_t> shape = ctx.ivalue(n->input(1)).toIntVector();
  const engine::Shape& xs = ctx.desc(x).shape;
  KILN_CHECK(!shape.empty() && shape.size() <= xs.size(), InvalidArgument, "normalized_shape has ",
             shape.size(), " dims for an input of shape ", engine::shape_to_string(xs));
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = xs[xs.size() - shape.size() + i];
    KILN_CHECK(d == engine::kDynamic || d == shape[i], ShapeMismatch, "normalized_shape dim ", i,
               " is ", shape[i], " but the input ", engine::shape_to_string(xs), " has ", d);
  }
  return shape;
}

// layer_norm(input, normalized_shape, weight?, bias?, eps, cudnn_enable)
void convert_layer_norm(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = floating_input(ctx, n);
  const std::vector<int64_t> shape = normalized_shape(ctx, n, x);
  engine::NormalizationParams p;
  p.kind = NormalizationKind::kLayer;
  p.normalized_dims = static_cast<int64_t>(shape.size());
  p.epsilon = static_number(ctx, n->input(4));
  std::vector<engine::TensorId> inputs = {x};
  p.has_affine = affine_inputs(
      ctx, n, n->input(2), n->input(3), [&] { return shape; }, inputs);
  ctx.set_tensor(n->output(), ctx.add(n, p, inputs));
}

// rms_norm(input, normalized_shape, weight?, eps?): x / sqrt(mean(x^2) + eps) [* weight]; eps
// None is the epsilon of x's dtype, as torch's.
void convert_rms_norm(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = floating_input(ctx, n);
  engine::NormalizationParams p;
  p.kind = NormalizationKind::kRms;
  p.normalized_dims = static_cast<int64_t>(normalized_shape(ctx, n, x).size());
  if (is_none(n->input(3))) {
    switch (ctx.desc(x).dtype) {
      case engine::DataType::kF16:
        p.epsilon = 0.0009765625;  // 2^-10
        break;
      case engine::DataType::kBF16:
        p.epsilon = 0.0078125;  // 2^-7
        break;
      default:
        p.epsilon = std::numeric_limits<float>::epsilon();
    }
  } else {
    p.epsilon = static_number(ctx, n->input(3));
  }
  std::vector<engine::TensorId> inputs = {x};
  p.has_affine = !is_none(n->input(2));
  if (p.has_affine) inputs.push_back(ctx.tensor(n->input(2)));
  ctx.set_tensor(n->output(), ctx.add(n, p, inputs));
}

// group_norm(input, num_groups, weight?, bias?, eps, cudnn_enabled)
void convert_group_norm(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = floating_input(ctx, n);
  engine::NormalizationParams p;
  p.kind = NormalizationKind::kGroup;
  p.num_groups = ctx.ivalue(n->input(1)).toInt();
  p.epsilon = static_number(ctx, n->input(4));
  std::vector<engine::TensorId> inputs = {x};
  p.has_affine = affine_inputs(
      ctx, n, n->input(2), n->input(3),
      [&] { return std::vector<int64_t>{static_channels(ctx, x)}; }, inputs);
  ctx.set_tensor(n->output(), ctx.add(n, p, inputs));
}

// instance_norm(input, weight?, bias?, running_mean?, running_var?, use_input_stats, momentum,
// eps, cudnn_enabled): statistics per (N, C); the running stats are not used.
void convert_instance_norm(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = floating_input(ctx, n);
  engine::NormalizationParams p;
  p.kind = NormalizationKind::kInstance;
  p.epsilon = static_number(ctx, n->input(7));
  std::vector<engine::TensorId> inputs = {x};
  p.has_affine = affine_inputs(
      ctx, n, n->input(1), n->input(2),
      [&] { return std::vector<int64_t>{static_channels(ctx, x)}; }, inputs);
  ctx.set_tensor(n->output(), ctx.add(n, p, inputs));
}

std::optional<std::string> instance_norm_input_stats(const Node* n) {
  if (auto r = require_static(n, {5, 7})) return r;
  if (!torch::jit::toIValue(n->input(5))->toBool()) {
    return std::string("instance_norm with use_input_stats=False (running statistics) is not ") +
           "supported";
  }
  return std::nullopt;
}

}  // namespace

void register_normalization_converters(Registry& r) {
  // Statistics are taken over the input's dims at run time; ones or zeros for a missing weight
  // or bias need static dims and refuse dynamic ones.
  r.add_converter(
      with_dynamic_shapes({{"aten::batch_norm"}, convert_batch_norm, batch_norm_inference}));
  r.add_converter(with_dynamic_shapes({{"aten::layer_norm"}, convert_layer_norm, [](const Node* n) {
                                         return require_static(n, {1, 4});
                                       }}));
  r.add_converter(with_dynamic_shapes({{"aten::rms_norm"}, convert_rms_norm, [](const Node* n) {
                                         return require_static(n, {1, 3});
                                       }}));
  r.add_converter(with_dynamic_shapes({{"aten::group_norm"}, convert_group_norm, [](const Node* n) {
                                         return require_static(n, {1, 4});
                                       }}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::instance_norm"}, convert_instance_norm, instance_norm_input_stats}));
}

}  // namespace kiln::conversion
