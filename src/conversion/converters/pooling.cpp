// Converters of the pooling family (max/avg 1-3-D, adaptive avg 1-3-D, adaptive max) to engine
// pooling layers; max pooling whose indices are used to a gather of its windows.
#include <cmath>
#include <limits>

#include "conversion/converters/convolution_params.h"
#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "conversion/dtypes.h"
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
    const engine::TensorId x = floating_input(ctx, n);
    if (n->inputs().size() < 7 || is_none(n->input(6))) {
      ctx.set_tensor(n->output(), ctx.add(n, p, {x}));
      return;
    }
    // divisor_override d: every window's sum over d, the average of whole windows (padding
    // counted) times K / d. Whole windows only: ceil_mode's last window may end past the padding,
    // where torch's count_include_pad average would divide by less than K.
    const int64_t divisor = ctx.ivalue(n->input(6)).toInt();
    KILN_CHECK(divisor != 0, InvalidArgument, "avg_pool: divisor_override must be nonzero");
    const engine::Shape& shape = ctx.desc(x).shape;
    int64_t window = 1;
    for (size_t j = 0; j < nd; ++j) {
      window *= p.kernel[j];
      if (!p.ceil_mode) continue;
      const int64_t in = shape[shape.size() - nd + j];
      KILN_CHECK(in != engine::kDynamic, Unsupported,
                 "avg_pool with divisor_override and ceil_mode over a dynamic dim");
      const int64_t k = p.kernel[j], s = p.strides[j], pad = p.padding_begin[j];
      int64_t out = (in + 2 * pad - k + s - 1) / s + 1;
      if ((out - 1) * s >= in + pad) --out;
      KILN_CHECK((out - 1) * s + k <= in + 2 * pad, Unsupported,
                 "avg_pool with divisor_override whose ceil_mode window ends past the padding");
    }
    p.count_include_pad = true;
    const engine::TensorId mean = ctx.add(n, p, {x}, "mean");
    const engine::TensorId scale =
        ctx.constant(at::scalar_tensor(static_cast<double>(window) / static_cast<double>(divisor),
                                       to_scalar_type(ctx.desc(x).dtype)),
                     "scale");
    ctx.set_tensor(n->output(),
                   ctx.add(n, engine::ElementwiseParams{engine::BinaryOp::kMul}, {mean, scale}));
  };
}

std::optional<std::string> avg_pool_validator(const Node* n) {
  return require_static_from(n, 1);
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

// The windows of a max pooling over static spatial dims `sizes`: for each output position (row
// major) the flat input positions of its window, those inside the input first in window order,
// then `padding` (the flat size: a slot that holds the lowest value) for the rest.
struct Windows {
  std::vector<int64_t> out;    // output spatial sizes
  int64_t count = 0;           // output positions
  int64_t width = 0;           // slots per window
  std::vector<int64_t> table;  // [count, width]
};

// Per dim, each output position's input positions (-1: padding), all lists of one length.
using DimWindows = std::vector<std::vector<int64_t>>;

// torch's pooling output size, ceil_mode's last window kept only if it starts inside the input
// or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d, bool ceil) {
  const int64_t span = in + 2 * pad - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  KILN_CHECK(span >= 0, InvalidArgument, "max pooling: a window of ", k, " (dilation ", d,
             ") does not fit an input of ", in, " with padding ", pad);
  int64_t out = span / s + 1;
  if (ceil && (out - 1) * s >= in + pad) --out;
  return out;
}

Windows windows(const std::vector<int64_t>& sizes, const std::vector<DimWindows>& dims) {
  Windows w;
  w.count = 1;
  w.width = 1;
  for (const DimWindows& d : dims) {
    w.out.push_back(static_cast<int64_t>(d.size()));
    w.count *= static_cast<int64_t>(d.size());
    w.width *= static_cast<int64_t>(d.front().size());
  }
  int64_t flat = 1;
  for (int64_t s : sizes) flat *= s;
  KILN_CHECK(w.count * w.width <= (int64_t{1} << 26), Unsupported,
             "max pooling with indices: a window table of ", w.count, " x ", w.width,
             " positions is too large");
  w.table.reserve(static_cast<size_t>(w.count * w.width));
  const size_t nd = dims.size();
  std::vector<int64_t> o(nd, 0);
  for (int64_t p = 0; p < w.count; ++p) {
    std::vector<int64_t> inside;
    std::vector<int64_t> k(nd, 0);
    for (int64_t e = 0; e < w.width; ++e) {
      int64_t at = 0;
      bool valid = true;
      for (size_t j = 0; j < nd; ++j) {
        const int64_t pos = dims[j][static_cast<size_t>(o[j])][static_cast<size_t>(k[j])];
        valid = valid && pos >= 0;
        at = at * sizes[j] + pos;
      }
      if (valid) inside.push_back(at);
      for (size_t j = nd; j-- > 0;) {  // the next window element, row major
        if (++k[j] < static_cast<int64_t>(dims[j].front().size())) break;
        k[j] = 0;
      }
    }
    inside.resize(static_cast<size_t>(w.width), flat);
    w.table.insert(w.table.end(), inside.begin(), inside.end());
    for (size_t j = nd; j-- > 0;) {  // the next output position, row major
      if (++o[j] < w.out[j]) break;
      o[j] = 0;
    }
  }
  return w;
}

// max_poolNd_with_indices(self, kernel, stride, padding, dilation, ceil_mode) and
// adaptive_max_poolNd(self, output_size) with their indices used: x's planes flattened, one slot
// of the lowest value appended, every window gathered as a row, its max and the flat input index
// of its max (torch's: the first of equal values, the last NaN) read from the window table.
ConvertFn max_pool_with_indices(size_t nd, bool adaptive) {
  return [nd, adaptive](ConversionContext& ctx, const Node* n) {
    const engine::TensorId x = ctx.tensor(n->input(0));
    const engine::Shape shape = ctx.desc(x).shape;
    const engine::DataType dtype = ctx.desc(x).dtype;
    KILN_CHECK(shape.size() == nd + 1 || shape.size() == nd + 2, InvalidArgument,
               n->kind().toQualString(), " of a rank-", shape.size(), " input");
    KILN_CHECK(dtype != engine::DataType::kBool, Unsupported, "max pooling of bools");
    const size_t lead = shape.size() - nd;
    std::vector<int64_t> sizes(shape.begin() + static_cast<long>(lead), shape.end());
    for (int64_t s : sizes) {
      KILN_CHECK(s != engine::kDynamic, Unsupported,
                 "max pooling with indices over dynamic spatial dims ",
                 engine::shape_to_string(shape));
    }
    std::vector<DimWindows> dims(nd);
    if (adaptive) {
      const std::vector<int64_t> out = int_list(ctx, n->input(1), nd, "output_size");
      for (size_t j = 0; j < nd; ++j) {
        const int64_t in = sizes[j], o = out[j];
        KILN_CHECK(o > 0 && in > 0, InvalidArgument, "adaptive max pooling of ", in, " to ", o);
        int64_t widest = 0;
        for (int64_t i = 0; i < o; ++i) {
          widest = std::max(widest, ((i + 1) * in + o - 1) / o - (i * in) / o);
        }
        for (int64_t i = 0; i < o; ++i) {
          const int64_t start = (i * in) / o, end = ((i + 1) * in + o - 1) / o;
          std::vector<int64_t> w;
          for (int64_t e = 0; e < widest; ++e) w.push_back(start + e < end ? start + e : -1);
          dims[j].push_back(w);
        }
      }
    } else {
      engine::PoolingParams p;
      window(ctx, n, nd, p);
      const std::vector<int64_t> dil = int_list(ctx, n->input(4), nd, "dilation");
      const bool ceil = ctx.ivalue(n->input(5)).toBool();
      for (size_t j = 0; j < nd; ++j) {
        const int64_t k = p.kernel[j], s = p.strides[j], pad = p.padding_begin[j], d = dil[j];
        KILN_CHECK(k > 0 && s > 0 && d > 0 && pad >= 0 && 2 * pad <= k, InvalidArgument,
                   "max pooling with kernel ", k, ", stride ", s, ", padding ", pad, ", dilation ",
                   d);
        const int64_t out = pooled_size(sizes[j], k, s, pad, d, ceil);
        KILN_CHECK(out > 0, InvalidArgument, "max pooling to an empty output");
        for (int64_t i = 0; i < out; ++i) {
          std::vector<int64_t> w;
          for (int64_t e = 0; e < k; ++e) {
            const int64_t pos = i * s - pad + e * d;
            w.push_back(pos >= 0 && pos < sizes[j] ? pos : -1);
          }
          dims[j].push_back(w);
        }
      }
    }
    const Windows w = windows(sizes, dims);
    // [lead.., plane] with the lowest value's slot appended, the windows gathered as rows.
    std::vector<TargetDim> flat;
    for (size_t d = 0; d < lead; ++d) flat.push_back(copy_dim(shape, d));
    int64_t plane = 1;
    for (int64_t s : sizes) plane *= s;
    flat.push_back({plane, -1});
    engine::TensorId rows = reshape_dims(ctx, n, x, flat, "planes");
    engine::PadParams pad;
    pad.begin.assign(lead + 1, 0);
    pad.end.assign(lead + 1, 0);
    pad.end[lead] = 1;
    pad.value = engine::is_floating(dtype)
                    ? -std::numeric_limits<double>::infinity()
                    : static_cast<double>(std::numeric_limits<int64_t>::min());
    KILN_CHECK(engine::is_floating(dtype) || dtype == engine::DataType::kI64 ||
                   dtype == engine::DataType::kI32,
               Unsupported, "max pooling with indices of ", engine::dtype_name(dtype));
    if (!engine::is_floating(dtype)) {
      pad.value = dtype == engine::DataType::kI32
                      ? static_cast<double>(std::numeric_limits<int32_t>::min())
                      : static_cast<double>(std::numeric_limits<int64_t>::min());
    }
    rows = ctx.add(n, pad, {rows}, "padded");
    const at::Tensor table = at::tensor(w.table, at::kLong);
    // The window table with each window's inside positions reversed: its first max is the last.
    at::Tensor reversed = table.view({w.count, w.width}).clone();
    {
      auto a = reversed.accessor<int64_t, 2>();
      for (int64_t p = 0; p < w.count; ++p) {
        int64_t inside = 0;
        while (inside < w.width && a[p][inside] != plane) ++inside;
        for (int64_t i = 0, j = inside - 1; i < j; ++i, --j) std::swap(a[p][i], a[p][j]);
      }
    }
    std::vector<TargetDim> grid;
    for (size_t d = 0; d < lead; ++d) grid.push_back(copy_dim(shape, d));
    grid.push_back({w.count, -1});
    grid.push_back({w.width, -1});
    const auto gather_windows = [&](const at::Tensor& t, const std::string& tag) {
      const engine::TensorId index = ctx.constant(t.reshape({-1}), "windows" + tag);
      const engine::TensorId g =
          ctx.add(n, engine::GatherParams{engine::GatherMode::kDefault, static_cast<int64_t>(lead)},
                  {rows, index}, "gathered" + tag);
      return reshape_dims(ctx, n, g, grid, "rows" + tag);
    };
    const engine::TensorId forward = gather_windows(table, "");
    const engine::TensorId backward = gather_windows(reversed, "_reversed");
    const int64_t last = static_cast<int64_t>(lead) + 1;
    const engine::TensorId values =
        ctx.add(n, engine::ReduceParams{engine::ReduceOp::kMax, {last}, false}, {forward}, "max");
    const engine::TensorId first =
        ctx.add(n, engine::ArgMaxParams{last, false, false}, {forward}, "first");
    const engine::TensorId from_end =
        ctx.add(n, engine::ArgMaxParams{last, false, false}, {backward}, "from_end");
    // The element of the window table each picks: p * width + its slot in the row.
    std::vector<int64_t> offsets;
    for (int64_t p = 0; p < w.count; ++p) offsets.push_back(p * w.width);
    const engine::TensorId offset = ctx.constant(at::tensor(offsets, at::kLong), "offsets");
    const auto index_of = [&](const at::Tensor& t, engine::TensorId slot, const std::string& tag) {
      const engine::TensorId at = ctx.add(n, engine::ElementwiseParams{engine::BinaryOp::kAdd},
                                          {slot, offset}, "slot" + tag);
      return ctx.add(n, engine::GatherParams{engine::GatherMode::kDefault, 0},
                     {ctx.constant(t, "table" + tag), at}, "index" + tag);
    };
    engine::TensorId index = index_of(table, first, "");
    if (engine::is_floating(dtype)) {
      const engine::TensorId nan =
          ctx.add(n, engine::ElementwiseParams{engine::BinaryOp::kNe}, {values, values}, "nan");
      index = ctx.add(n, engine::SelectParams{},
                      {nan, index_of(reversed.reshape({-1}), from_end, "_reversed"), index},
                      "index_nan_last");
    }
    std::vector<TargetDim> out;
    for (size_t d = 0; d < lead; ++d) out.push_back(copy_dim(shape, d));
    for (int64_t s : w.out) out.push_back({s, -1});
    ctx.set_tensor(n->output(0), reshape_dims(ctx, n, values, out, "values"));
    ctx.set_tensor(n->output(1), reshape_dims(ctx, n, index, out, "indices"));
  };
}

}  // namespace

void register_pooling_converters(Registry& r) {
  // Pooling layers derive their output dims at run time; the window gathers (indices,
  // divisor_override with ceil_mode) refuse dynamic spatial dims.
  const CapabilityValidator all_static = [](const Node* n) { return require_static_from(n, 1); };
  r.add_converter(with_dynamic_shapes({{"aten::max_pool1d"}, max_pool(1), all_static}));
  r.add_converter(with_dynamic_shapes({{"aten::max_pool2d"}, max_pool(2), all_static}));
  r.add_converter(with_dynamic_shapes({{"aten::max_pool3d"}, max_pool(3), all_static}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::max_pool1d_with_indices"}, max_pool_with_indices(1, false), all_static}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::max_pool2d_with_indices"}, max_pool_with_indices(2, false), all_static}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::max_pool3d_with_indices"}, max_pool_with_indices(3, false), all_static}));
  r.add_converter(with_dynamic_shapes({{"aten::avg_pool1d"}, avg_pool(1), avg_pool_validator}));
  r.add_converter(with_dynamic_shapes({{"aten::avg_pool2d"}, avg_pool(2), avg_pool_validator}));
  r.add_converter(with_dynamic_shapes({{"aten::avg_pool3d"}, avg_pool(3), avg_pool_validator}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::adaptive_avg_pool1d"}, adaptive_pool(PoolingKind::kAverage, 1), all_static}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::adaptive_avg_pool2d"}, adaptive_pool(PoolingKind::kAverage, 2), all_static}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::adaptive_avg_pool3d"}, adaptive_pool(PoolingKind::kAverage, 3), all_static}));
  for (size_t nd = 1; nd <= 3; ++nd) {
    const std::string op = "aten::adaptive_max_pool" + std::to_string(nd) + "d";
    // The engine's pooling where the indices go unused, the window gather where they are used.
    const ConvertFn pool = adaptive_pool(PoolingKind::kMax, nd);
    const ConvertFn gather = max_pool_with_indices(nd, true);
    r.add_converter(with_dynamic_shapes(
        {{op},
         [pool, gather](ConversionContext& ctx, const Node* n) {
           (n->outputs().size() > 1 && n->output(1)->hasUses() ? gather : pool)(ctx, n);
         },
         all_static}));
  }
}

}  // namespace kiln::conversion
