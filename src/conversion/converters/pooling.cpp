// Converters of the pooling family (max/avg 1-3-D, adaptive avg 1-3-D, adaptive max) to engine
// pooling layers.
#include "conversion/converters/convolution_params.h"
#include "conversion/converters/operands.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::PoolingKind;
using torch::jit::Node;

engine::TensorId floating_input(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = ctx.tensor(n->input(0));
  KILN_CHECK(engine::is_floating(ctx.desc(x).dtype), Unsupported, "pooling of a ",
             engine::dtype_name(ctx.desc(x).dtype),
             " input (the engine pools floating tensors only)");
  return x;
}

// kernel, stride (empty: the kernel), padding: the inputs 1..3 of every windowed pooling op.
void window(ConversionContext& ctx, const Node* n, size_t nd, engine::PoolingParams& p) {
  p.kernel = int_list(ctx, n->input(1), nd, "kernel_size");
  p.strides = int_list(ctx, n->input(2), nd, "stride", p.kernel);
  p.padding_begin = int_list(ctx, n->input(3), nd, "padding");
  p.padding_end = p.padding_begin;  // torch pads symmetrically
}

// max_poolNd(self, kernel_size, stride, padding, dilation, ceil_mode)
ConvertFn max_pool(size_t nd) {
  return [nd](ConversionContext& ctx, const Node* n) {
    engine::PoolingParams p;
    p.kind = PoolingKind::kMax;
    window(ctx, n, nd, p);
    p.dilations = int_list(ctx, n->input(4), nd, "dilation");
    p.ceil_mode = ctx.ivalue(n->input(5)).toBool();
    ctx.set_tensor(n->output(0), ctx.add(n, p, {floating_input(ctx, n)}));
  };
}

// avg_poolNd(self, kernel_size, stride, padding, ceil_mode, count_include_pad[, divisor_override])
ConvertFn avg_pool(size_t nd) {
  return [nd](ConversionContext& ctx, const Node* n) {
    engine::PoolingParams p;
    p.kind = PoolingKind::kAverage;
    window(ctx, n, nd, p);
    p.ceil_mode = ctx.ivalue(n->input(4)).toBool();
    p.count_include_pad = ctx.ivalue(n->input(5)).toBool();
    ctx.set_tensor(n->output(), ctx.add(n, p, {floating_input(ctx, n)}));
  };
}

std::optional<std::string> avg_pool_validator(const Node* n) {
  if (auto r = require_static_from(n, 1)) return r;
  if (n->inputs().size() > 6 && !is_none(n->input(6))) {
    return std::string("avg_pool with divisor_override is not supported");
  }
  return std::nullopt;
}

// adaptive_{avg,max}_poolNd(self, output_size). The max form also returns indices, which the
// engine does not compute: it is only convertible when nothing uses them.
ConvertFn adaptive_pool(PoolingKind kind, size_t nd) {
  return [kind, nd](ConversionContext& ctx, const Node* n) {
    engine::PoolingParams p;
    p.kind = kind;
    p.adaptive = true;
    p.output_size = int_list(ctx, n->input(1), nd, "output_size");
    ctx.set_tensor(n->output(0), ctx.add(n, p, {floating_input(ctx, n)}));
    // The unused indices output gets a placeholder static value so that conversion sees every
    // output set; the validator guarantees no node reads it.
    if (n->outputs().size() > 1) ctx.set_ivalue(n->output(1), c10::IValue());
  };
}

std::optional<std::string> adaptive_max_validator(const Node* n) {
  if (auto r = require_static(n, {1})) return r;
  if (n->outputs().size() > 1 && n->output(1)->hasUses()) {
    return std::string("the indices output of ") + n->kind().toQualString() +
           " is used; the engine's pooling has no indices output";
  }
  return std::nullopt;
}

std::optional<std::string> reject_indices(const Node* n) {
  return std::string(n->kind().toQualString()) +
         " (return_indices=True) is not supported: the engine's pooling has no indices output";
}

}  // namespace

void register_pooling_converters(Registry& r) {
  const CapabilityValidator all_static = [](const Node* n) { return require_static_from(n, 1); };
  r.add_converter({{"aten::max_pool1d"}, max_pool(1), all_static});
  r.add_converter({{"aten::max_pool2d"}, max_pool(2), all_static});
  r.add_converter({{"aten::max_pool3d"}, max_pool(3), all_static});
  // Registered so that partitioning reports why they stay in torch.
  r.add_converter(
      {{"aten::max_pool1d_with_indices", "aten::max_pool2d_with_indices",
        "aten::max_pool3d_with_indices"},
       [](ConversionContext&, const Node* n) { KILN_THROW(Unsupported, *reject_indices(n)); },
       reject_indices});
  r.add_converter({{"aten::avg_pool1d"}, avg_pool(1), avg_pool_validator});
  r.add_converter({{"aten::avg_pool2d"}, avg_pool(2), avg_pool_validator});
  r.add_converter({{"aten::avg_pool3d"}, avg_pool(3), avg_pool_validator});
  r.add_converter(
      {{"aten::adaptive_avg_pool1d"}, adaptive_pool(PoolingKind::kAverage, 1), all_static});
  r.add_converter(
      {{"aten::adaptive_avg_pool2d"}, adaptive_pool(PoolingKind::kAverage, 2), all_static});
  r.add_converter(
      {{"aten::adaptive_avg_pool3d"}, adaptive_pool(PoolingKind::kAverage, 3), all_static});
  r.add_converter(
      {{"aten::adaptive_max_pool1d"}, adaptive_pool(PoolingKind::kMax, 1), adaptive_max_validator});
  r.add_converter(
      {{"aten::adaptive_max_pool2d"}, adaptive_pool(PoolingKind::kMax, 2), adaptive_max_validator});
  r.add_converter(
      {{"aten::adaptive_max_pool3d"}, adaptive_pool(PoolingKind::kMax, 3), adaptive_max_validator});
}

}  // namespace kiln::conversion
