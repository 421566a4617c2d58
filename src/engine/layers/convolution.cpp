// Shape inference of the convolution family: 1-3-D (transposed) convolution, torch semantics.
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

// A per-spatial-dim parameter: empty means `fallback` everywhere, otherwise one value per dim.
std::vector<int64_t> per_dim(const std::string& layer, const char* name,
                             const std::vector<int64_t>& v, size_t nd, int64_t fallback,
                             int64_t min_value) {
  if (v.empty()) return std::vector<int64_t>(nd, fallback);
  KILN_CHECK(v.size() == nd, InvalidArgument, "layer `", layer, "` (convolution): ", name, " has ",
             v.size(), " values for ", nd, " spatial dims");
  for (int64_t x : v) {
    // Within 2^48, as tensor dims are, so that the window arithmetic cannot overflow (plan fields
    // may hold int64's extremes).
    KILN_CHECK(x >= min_value && x <= (int64_t{1} << 48), InvalidArgument, "layer `", layer,
               "` (convolution): ", name, " must be in [", min_value, ", 2^48], got ", x);
  }
  return v;
}

}  // namespace

std::vector<InferOutput> infer(const std::string& layer, const ConvolutionParams& p,
                               const std::vector<InferInput>& in) {
  if (p.channels_last) {
    // The same rules on the channels-first view: data, weights and residual permuted.
    KILN_CHECK(!p.transposed, InvalidArgument, "layer `", layer,
               "` (convolution): a transposed convolution cannot be channels-last");
    ConvolutionParams first = p;
    first.channels_last = false;
    std::vector<InferInput> permuted = in;
    for (size_t i = 0; i < permuted.size(); ++i) {
      const bool is_bias = p.post.has_bias && i == 2;
      if (!is_bias) permuted[i].shape = to_channels_first(permuted[i].shape);
    }
    auto out = infer(layer, first, permuted);
    out[0].shape = to_channels_last(out[0].shape);
    return out;
  }
  const size_t count = 2 + (p.post.has_bias ? 1 : 0) + (p.post.has_residual ? 1 : 0);
  expect_input_count(layer, in, count, count);
  const DataType dt = in[0].dtype;
  for (size_t i = 0; i < in.size(); ++i) {
    KILN_CHECK(in[i].dtype == dt, InvalidArgument, "layer `", layer, "` (convolution): input ", i,
               " is ", dtype_name(in[i].dtype), " but the data is ", dtype_name(dt),
               "; insert a cast");
  }
  KILN_CHECK(is_floating(dt), InvalidArgument, "layer `", layer,
             "` (convolution): needs floating inputs, got ", dtype_name(dt));
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  KILN_CHECK(w.size() >= 3 && w.size() <= 5, InvalidArgument, "layer `", layer,
             "` (convolution): weights must be [O, C/groups, k...] with 1 to 3 spatial dims, got ",
             shape_to_string(w));
  const size_t nd = w.size() - 2;
  KILN_CHECK(x.size() == nd + 2, InvalidArgument, "layer `", layer, "` (convolution): data ",
             shape_to_string(x), " must have rank ", nd + 2, " to match weights ",
             shape_to_string(w));
  KILN_CHECK(p.groups >= 1, InvalidArgument, "layer `", layer,
             "` (convolution): groups must be >= 1, got ", p.groups);
  const auto strides = per_dim(layer, "strides", p.strides, nd, 1, 1);
  const auto pb = per_dim(layer, "padding_begin", p.padding_begin, nd, 0, 0);
  const auto pe = per_dim(layer, "padding_end", p.padding_end, nd, 0, 0);
  const auto dil = per_dim(layer, "dilations", p.dilations, nd, 1, 1);
  KILN_CHECK(p.transposed || p.output_padding.empty(), InvalidArgument, "layer `", layer,
             "` (convolution): output_padding is for transposed convolutions only");
  const auto op = per_dim(layer, "output_padding", p.output_padding, nd, 0, 0);
  for (size_t d = 0; d < nd; ++d) {
    KILN_CHECK(op[d] < std::max(strides[d], dil[d]), InvalidArgument, "layer `", layer,
               "` (convolution): output_padding ", op[d],
               " must be smaller than the stride or "
               "the dilation");
  }
  const int64_t g = p.groups;
  const int64_t c = x[1];
  // Channel bookkeeping differs: w is [O, C/g, k...], or [C, O/g, k...] when transposed.
  int64_t out_channels;
  if (!p.transposed) {
    const int64_t c_per_group = w[1];
    KILN_CHECK(w[0] == kDynamic || w[0] % g == 0, ShapeMismatch, "layer `", layer,
               "` (convolution): ", w[0], " output channels do not divide into ", g, " groups");
    const int64_t expected = c_per_group == kDynamic
                                 ? kDynamic
                                 : size_product(layer, "(convolution) channels", c_per_group, g);
    KILN_CHECK(c == kDynamic || expected == kDynamic || c == expected, ShapeMismatch, "layer `",
               layer, "` (convolution): data has ", c, " channels but weights ", shape_to_string(w),
               " with ", g, " groups expect ", expected);
    out_channels = w[0];
  } else {
    KILN_CHECK(w[0] == kDynamic || w[0] % g == 0, ShapeMismatch, "layer `", layer,
               "` (transposed convolution): ", w[0], " input channels do not divide into ", g,
               " groups");
    KILN_CHECK(c == kDynamic || w[0] == kDynamic || c == w[0], ShapeMismatch, "layer `", layer,
               "` (transposed convolution): data has ", c, " channels but weights ",
               shape_to_string(w), " expect ", w[0]);
    out_channels =
        w[1] == kDynamic ? kDynamic : size_product(layer, "(convolution) channels", w[1], g);
  }
  Shape out = {x[0], out_channels};
  for (size_t d = 0; d < nd; ++d) {
    const int64_t i = x[d + 2], k = w[d + 2];
    if (i == kDynamic || k == kDynamic) {
      out.push_back(kDynamic);
      continue;
    }
    // Every term is within 2^48, so the sums below cannot overflow.
    const int64_t window =
        size_product(layer, "(convolution) dilation * (kernel - 1)", dil[d], k - 1);
    int64_t o;
    if (p.transposed) {
      o = size_product(layer, "(transposed convolution) stride * (input - 1)", i - 1, strides[d]) -
          pb[d] - pe[d] + window + op[d] + 1;
    } else {
      const int64_t span = i + pb[d] + pe[d] - window - 1;
      o = span < 0 ? 0 : span / strides[d] + 1;
    }
    KILN_CHECK(o > 0, ShapeMismatch, "layer `", layer, "` (convolution): spatial dim ", d,
               " of data ", shape_to_string(x), " with kernel ", k, " gives an empty output");
    out.push_back(o);
  }

  size_t next = 2;
  if (p.post.has_bias) {
    const Shape& bias = in[next++].shape;
    KILN_CHECK(bias.size() == 1 &&
                   (bias[0] == kDynamic || out_channels == kDynamic || bias[0] == out_channels),
               ShapeMismatch, "layer `", layer, "` (convolution): bias must be [", out_channels,
               "], got ", shape_to_string(bias));
  }
  if (p.post.has_residual) {
    const Shape& res = in[next++].shape;
    const Shape both = broadcast_shapes(out, res, "layer `" + layer + "` (convolution residual)");
    bool fits = both.size() == out.size();
    for (size_t d = 0; fits && d < out.size(); ++d) fits = out[d] == kDynamic || both[d] == out[d];
    KILN_CHECK(fits, ShapeMismatch, "layer `", layer, "` (convolution): residual ",
               shape_to_string(res), " does not broadcast to the output ", shape_to_string(out));
  }
  return {{dt, out}};
}

}  // namespace kiln::engine
