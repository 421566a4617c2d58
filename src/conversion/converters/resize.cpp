// Converters of upsampling (nearest, linear, bilinear, trilinear, bicubic; by output size or
// scale factors, with align_corners) to engine resize layers, in both the .vec overloads that
// F.interpolate emits and the per-dim-scale overloads.
#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::ResizeMode;
using engine::TensorId;
using torch::jit::Node;

struct Resize {
  ResizeMode mode;
  size_t spatial;  // 1, 2 or 3 spatial dims
};

std::vector<double> static_doubles(ConversionContext& ctx, const torch::jit::Value* v) {
  const c10::IValue& iv = ctx.ivalue(v);
  KILN_CHECK(iv.isDoubleList(), Unsupported, "value %", v->debugName(), " is a ", iv.tagKind(),
             ", not a list of floats");
  return iv.toDoubleVector();
}

TensorId input_of(ConversionContext& ctx, const Node* n, size_t spatial) {
  const TensorId x = ctx.tensor(n->input(0));
  KILN_CHECK(ctx.desc(x).shape.size() == spatial + 2, InvalidArgument, "expected a ", spatial + 2,
             "-d input, got ", engine::shape_to_string(ctx.desc(x).shape));
  return x;
}

// The .vec overloads: (input, output_size?, [align_corners,] scale_factors?). Scale factors give
// the output size (floor(in * scale)) and, as in torch, the coordinate mapping.
ConvertFn resize_vec(Resize r) {
  return [r](ConversionContext& ctx, const Node* n) {
    const TensorId x = input_of(ctx, n, r.spatial);
    const bool has_align = r.mode != ResizeMode::kNearest;
    engine::ResizeParams p;
    p.mode = r.mode;
    p.align_corners = has_align && ctx.ivalue(n->input(2)).toBool();
    const torch::jit::Value* scales = n->input(has_align ? 3 : 2);
    if (!is_none(n->input(1))) {
      p.output_size = static_ints(ctx, n->input(1));
    } else {
      KILN_CHECK(!is_none(scales), InvalidArgument, "neither output_size nor scale_factors given");
      p.scales = static_doubles(ctx, scales);
    }
    ctx.set_tensor(n->output(), ctx.add(n, p, {x}));
  };
}

// The per-dim overloads: (self, output_size, [align_corners,] scale_d?, scale_h?, scale_w?).
// Scales, when given, only define the coordinate mapping; a missing one maps by in/out size,
// which is the scale out/in.
ConvertFn resize_sized(Resize r) {
  return [r](ConversionContext& ctx, const Node* n) {
    const TensorId x = input_of(ctx, n, r.spatial);
    const engine::Shape shape = ctx.desc(x).shape;
    const bool has_align = r.mode != ResizeMode::kNearest;
    engine::ResizeParams p;
    p.mode = r.mode;
    p.align_corners = has_align && ctx.ivalue(n->input(2)).toBool();
    p.output_size = static_ints(ctx, n->input(1));
    KILN_CHECK(p.output_size.size() == r.spatial, InvalidArgument, "expected ", r.spatial,
               " output sizes, got ", p.output_size.size());
    const size_t first = has_align ? 3 : 2;
    bool any = false;
    std::vector<double> scales(r.spatial);
    for (size_t d = 0; d < r.spatial; ++d) {
      const torch::jit::Value* s = first + d < n->inputs().size() ? n->input(first + d) : nullptr;
      if (s && !is_none(s)) {
        scales[d] = static_number(ctx, s);
        any = any || scales[d] > 0;
      }
    }
    if (any) {
      for (size_t d = 0; d < r.spatial; ++d) {
        if (scales[d] > 0) continue;
        const int64_t in = shape[d + 2];
        KILN_CHECK(in != engine::kDynamic && in > 0, Unsupported,
                   "resize with scales for some dims but not dim ", d + 2, ", which is dynamic");
        scales[d] = static_cast<double>(p.output_size[d]) / static_cast<double>(in);
      }
      p.scales = scales;
    }
    ctx.set_tensor(n->output(), ctx.add(n, p, {x}));
  };
}

void add(Registry& r, const std::string& name, Resize kind) {
  const size_t args = kind.mode == ResizeMode::kNearest ? 2 : 3;
  std::vector<size_t> vec_args, sized_args;
  for (size_t i = 1; i <= args; ++i) vec_args.push_back(i);
  for (size_t i = 1; i < args + kind.spatial; ++i) sized_args.push_back(i);
  r.add_converter(with_dynamic_shapes(
      {existing_schemas({name + ".vec"}), resize_vec(kind), static_inputs(vec_args)}));
  r.add_converter(with_dynamic_shapes(
      {existing_schemas({name}), resize_sized(kind), static_inputs(sized_args)}));
}

}  // namespace

void register_resize_converters(Registry& r) {
  // Static output sizes or scales; a scale derived from a dynamic input dim refuses.
  add(r, "aten::upsample_nearest1d", {ResizeMode::kNearest, 1});
  add(r, "aten::upsample_nearest2d", {ResizeMode::kNearest, 2});
  add(r, "aten::upsample_nearest3d", {ResizeMode::kNearest, 3});
  add(r, "aten::upsample_linear1d", {ResizeMode::kLinear, 1});
  add(r, "aten::upsample_bilinear2d", {ResizeMode::kLinear, 2});
  add(r, "aten::upsample_trilinear3d", {ResizeMode::kLinear, 3});
  add(r, "aten::upsample_bicubic2d", {ResizeMode::kCubic, 2});
}

}  // namespace kiln::conversion
