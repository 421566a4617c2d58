// Converters of the convolution family (conv1d/2d/3d, transposed, traced _convolution) to engine
// convolution layers with the bias as a post-op input.
#include "conversion/converters/convolution_params.h"
#include "conversion/converters/operands.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Where a convolution's parameters sit in the node's inputs; -1 when the schema lacks one.
struct ConvArgs {
  int stride, padding, dilation, transposed, output_padding, groups;
};
// conv1d/2d/3d and their .padding overloads (padding given as "same"/"valid").
constexpr ConvArgs kConvArgs{3, 4, 5, -1, -1, 6};
// conv_transpose1d/2d/3d: output_padding and groups come before dilation.
constexpr ConvArgs kConvTransposeArgs{3, 4, 7, -1, 5, 6};
// _convolution and convolution; the cudnn/benchmark flags after groups do not change results.
constexpr ConvArgs kConvolutionArgs{3, 4, 5, 6, 7, 8};

// Torch's "same": the total padding dilation*(k-1) split with the extra element at the end.
void same_padding(const std::vector<int64_t>& kernel, const std::vector<int64_t>& dil,
                  const std::vector<int64_t>& strides, engine::ConvolutionParams& p) {
  for (size_t d = 0; d < kernel.size(); ++d) {
    KILN_CHECK(strides[d] == 1, Unsupported, "padding='same' needs stride 1, got ", strides[d]);
    KILN_CHECK(kernel[d] != engine::kDynamic, Unsupported,
               "padding='same' with a weight whose spatial dim ", d,
               " is dynamic: the padding depends on the kernel size");
    const int64_t total = dil[d] * (kernel[d] - 1);
    p.padding_begin.push_back(total / 2);
    p.padding_end.push_back(total - total / 2);
  }
}

void convert_convolution(ConversionContext& ctx, const Node* n, const ConvArgs& a,
                         bool transposed_op) {
  engine::TensorId x = ctx.tensor(n->input(0));
  const engine::DataType dtype = ctx.desc(x).dtype;
  KILN_CHECK(engine::is_floating(dtype), Unsupported, "convolution of a ",
             engine::dtype_name(dtype), " input (the engine convolves floating tensors only)");
  const engine::TensorId w = ctx.cast(n, ctx.tensor(n->input(1)), dtype);
  const engine::Shape& ws = ctx.desc(w).shape;
  KILN_CHECK(ws.size() >= 3 && ws.size() <= 5, Unsupported, "weight of shape ",
             engine::shape_to_string(ws), ": only 1-D to 3-D convolutions are supported");
  const size_t nd = ws.size() - 2;

  engine::ConvolutionParams p;
  p.transposed = a.transposed >= 0 ? ctx.ivalue(n->input(a.transposed)).toBool() : transposed_op;
  p.strides = int_list(ctx, n->input(a.stride), nd, "stride");
  p.dilations = int_list(ctx, n->input(a.dilation), nd, "dilation");
  p.groups = ctx.ivalue(n->input(a.groups)).toInt();
  const c10::IValue& padding = ctx.ivalue(n->input(a.padding));
  if (padding.isString()) {
    const std::string& mode = padding.toStringRef();
    if (mode == "same") {
      same_padding(std::vector<int64_t>(ws.begin() + 2, ws.end()), p.dilations, p.strides, p);
    } else {
      KILN_CHECK(mode == "valid", InvalidArgument, "unknown padding mode `", mode, "`");
    }
  } else {
    p.padding_begin = int_list(ctx, n->input(a.padding), nd, "padding");
    p.padding_end = p.padding_begin;  // torch pads symmetrically
  }
  if (p.transposed) {
    p.output_padding = a.output_padding >= 0
                           ? int_list(ctx, n->input(a.output_padding), nd, "output_padding")
                           : std::vector<int64_t>(nd, 0);
  }

  // Unbatched inputs [C, spatial...] run as a batch of one.
  const size_t rank = ctx.desc(x).shape.size();
  KILN_CHECK(rank == nd + 1 || rank == nd + 2, ShapeMismatch, "input of shape ",
             engine::shape_to_string(ctx.desc(x).shape), " for a ", nd,
             "-D convolution (expected rank ", nd + 1, " or ", nd + 2, ")");
  const bool unbatched = rank == nd + 1;
  if (unbatched) x = add_leading_dim(ctx, n, x);

  std::vector<engine::TensorId> inputs = {x, w};
  if (!is_none(n->input(2))) {
    p.post.has_bias = true;
    inputs.push_back(ctx.cast(n, ctx.tensor(n->input(2)), dtype));
  }
  engine::TensorId y = ctx.add(n, p, inputs);
  if (unbatched) y = drop_leading_dim(ctx, n, y);
  ctx.set_tensor(n->output(), y);
}

CapabilityValidator conv_validator(const ConvArgs& a) {
  return [a](const Node* n) -> std::optional<std::string> {
    for (int i : {a.stride, a.padding, a.dilation, a.transposed, a.output_padding, a.groups}) {
      if (i < 0) continue;
      if (auto r = require_static(n, {static_cast<size_t>(i)})) return r;
    }
    return std::nullopt;
  };
}

ConverterEntry entry(std::vector<std::string> schemas, const ConvArgs& a, bool transposed) {
  return {std::move(schemas),
          [a, transposed](ConversionContext& ctx, const Node* n) {
            convert_convolution(ctx, n, a, transposed);
          },
          conv_validator(a)};
}

}  // namespace

void register_convolution_converters(Registry& r) {
  // The convolution layer derives its output dims from the input's, dynamic ones included;
  // padding='same' refuses a dynamic kernel dim.
  r.add_converter(with_dynamic_shapes(
      entry({"aten::_convolution", "aten::_convolution.deprecated", "aten::convolution"},
            kConvolutionArgs, false)));
  r.add_converter(with_dynamic_shapes(
      entry({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv1d.padding",
             "aten::conv2d.padding", "aten::conv3d.padding"},
            kConvArgs, false)));
  r.add_converter(with_dynamic_shapes(entry(
      {"aten::conv_transpose1d", "aten::conv_transpose2d.input", "aten::conv_transpose3d.input"},
      kConvTransposeArgs, true)));
}

}  // namespace kiln::conversion
