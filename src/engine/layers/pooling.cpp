// Shape inference of the pooling family: max/average, 1-3-D, windowed or adaptive (torch rules).
#include <algorithm>

#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

std::vector<int64_t> per_dim(const std::string& layer, const char* name,
                             const std::vector<int64_t>& v, size_t nd,
                             const std::vector<int64_t>& fallback, int64_t min_value) {
  if (v.empty()) return fallback;
  KILN_CHECK(v.size() == nd, InvalidArgument, "layer `", layer, "` (pooling): ", name, " has ",
             v.size(), " values for ", nd, " spatial dims");
  for (int64_t x : v) {
    // Within 2^48, as tensor dims are, so that the window arithmetic cannot overflow (plan fields
    // may hold int64's extremes).
    KILN_CHECK(x >= min_value && x <= (int64_t{1} << 48), InvalidArgument, "layer `", layer,
               "` (pooling): ", name, " must be in [", min_value, ", 2^48], got ", x);
  }
  return v;
}

// Output extent of one windowed dim, torch's pooling_output_shape with asymmetric padding:
// with ceil_mode the last window must still start inside the input or the begin padding.
// `window` is the dilated kernel, d * (k - 1) + 1.
int64_t pooled_extent(int64_t in, int64_t window, int64_t s, int64_t pb, int64_t pe,
                      bool ceil_mode) {
  const int64_t span = in + pb + pe - window;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pb) --out;
  return out;
}

}  // namespace

std::vector<InferOutput> infer(const std::string& layer, const PoolingParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  if (p.channels_last) {
    const size_t nd = p.adaptive ? p.output_size.size() : p.kernel.size();
    KILN_CHECK(in[0].shape.size() == nd + 2, InvalidArgument, "layer `", layer,
               "` (pooling): a channels-last input must be [N, spatial..., C] with ", nd,
               " spatial dims, got ", shape_to_string(in[0].shape));
    PoolingParams first = p;
    first.channels_last = false;
    auto out = infer(layer, first, {{in[0].dtype, to_channels_first(in[0].shape)}});
    out[0].shape = to_channels_last(out[0].shape);
    return out;
  }
  KILN_CHECK(is_floating(in[0].dtype), InvalidArgument, "layer `", layer,
             "` (pooling): needs a floating input, got ", dtype_name(in[0].dtype));
  const Shape& x = in[0].shape;
  const size_t nd = p.adaptive ? p.output_size.size() : p.kernel.size();
  KILN_CHECK(nd >= 1 && nd <= 3, InvalidArgument, "layer `", layer,
             "` (pooling): ", p.adaptive ? "output_size" : "kernel",
             " must have 1 to 3 values, got ", nd);
  // The pooled dims are the trailing nd; [C, spatial...] (unbatched) is accepted as torch does.
  KILN_CHECK(x.size() == nd + 1 || x.size() == nd + 2, InvalidArgument, "layer `", layer,
             "` (pooling): input ", shape_to_string(x), " must have rank ", nd + 1, " or ", nd + 2,
             " for ", nd, "-D pooling");
  const size_t lead = x.size() - nd;
  Shape out(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(lead));
  if (p.adaptive) {
    for (size_t d = 0; d < nd; ++d) {
      const int64_t o = p.output_size[d], i = x[lead + d];
      KILN_CHECK(o >= 0, InvalidArgument, "layer `", layer,
                 "` (adaptive pooling): output_size must be >= 0, got ", o);
      KILN_CHECK(i != 0 || o == 0, ShapeMismatch, "layer `", layer,
                 "` (adaptive pooling): cannot pool an empty spatial dim of ", shape_to_string(x),
                 " to ", o);
      out.push_back(o);
    }
    return {{in[0].dtype, out}};
  }
  const auto kernel = per_dim(layer, "kernel", p.kernel, nd, {}, 1);
  const auto strides = per_dim(layer, "strides", p.strides, nd, kernel, 1);
  const auto pb =
      per_dim(layer, "padding_begin", p.padding_begin, nd, std::vector<int64_t>(nd, 0), 0);
  const auto pe = per_dim(layer, "padding_end", p.padding_end, nd, std::vector<int64_t>(nd, 0), 0);
  const auto dil = per_dim(layer, "dilations", p.dilations, nd, std::vector<int64_t>(nd, 1), 1);
  for (size_t d = 0; d < nd; ++d) {
    KILN_CHECK(p.kind == PoolingKind::kMax || dil[d] == 1, Unsupported, "layer `", layer,
               "` (average pooling): dilation ", dil[d], " is not supported (torch has none)");
    // Torch's limit; it also guarantees every window overlaps the input.
    const int64_t effective =
        size_product(layer, "(pooling) dilation * (kernel - 1)", dil[d], kernel[d] - 1) + 1;
    KILN_CHECK(pb[d] <= effective / 2 && pe[d] <= effective / 2, InvalidArgument, "layer `", layer,
               "` (pooling): padding must be at most half the (dilated) kernel ", effective,
               ", got ", pb[d], "/", pe[d]);
    const int64_t i = x[lead + d];
    if (i == kDynamic) {
      out.push_back(kDynamic);
      continue;
    }
    const int64_t o = pooled_extent(i, effective, strides[d], pb[d], pe[d], p.ceil_mode);
    KILN_CHECK(o > 0, ShapeMismatch, "layer `", layer, "` (pooling): spatial dim ", d, " of input ",
               shape_to_string(x), " is too small for kernel ", kernel[d]);
    out.push_back(o);
  }
  return {{in[0].dtype, out}};
}

std::vector<InferOutput> infer(const std::string& layer, const SqueezeExcitationParams& p,
                               const std::vector<InferInput>& in) {
  const size_t excitation = p.excitation_inputs();
  const size_t expected =
      excitation +
      (p.project ? 1 + (p.projection.has_bias ? 1 : 0) + (p.projection.has_residual ? 1 : 0) : 0);
  expect_input_count(layer, in, expected, expected);
  const auto fail = [&](const auto&... why) {
    KILN_THROW(InvalidArgument, "layer `", layer, "` (squeeze_excitation): ", why...);
  };
  const Shape& x = in[0].shape;
  if (!is_floating(in[0].dtype)) fail("needs a floating input, got ", dtype_name(in[0].dtype));
  if (x.size() < 3) fail("input ", shape_to_string(x), " needs a batch, channel and spatial dim");
  if (p.project && !p.channels_last) fail("a projection needs channels-last data");
  const int64_t c = p.channels_last ? x.back() : x[1];
  const InferInput& w1 = in[1];
  const InferInput& w2 = in[p.has_bias1 ? 3 : 2];
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].dtype != in[0].dtype) {
      fail("input ", i, " is ", dtype_name(in[i].dtype), ", not ", dtype_name(in[0].dtype),
           " as the data");
    }
    for (int64_t d : in[i].shape) {
      if (d == kDynamic) fail("weights, biases and residuals need static shapes");
    }
  }
  if (w1.shape.empty() || w2.shape.empty() || w1.shape[0] < 1) {
    fail("w1 ", shape_to_string(w1.shape), " and w2 ", shape_to_string(w2.shape),
         " need a leading dim (w1's: S >= 1)");
  }
  const int64_t s = w1.shape[0];
  if (c != kDynamic) {
    const int64_t sc = size_product(layer, "(squeeze_excitation) S * C", s, c);
    if (volume(w1.shape) != sc || w2.shape[0] != c || volume(w2.shape) != sc) {
      fail("weights ", shape_to_string(w1.shape), " and ", shape_to_string(w2.shape),
           " do not map ", c, " channels to [S, C] and back");
    }
    if (p.has_bias2 && volume(in[excitation - 1].shape) != c) {
      fail("b2 ", shape_to_string(in[excitation - 1].shape), " needs ", c, " values");
    }
  }
  if (p.has_bias1 && volume(in[2].shape) != s) {
    fail("b1 ", shape_to_string(in[2].shape), " needs ", s, " values");
  }
  if (!p.project) return {{in[0].dtype, x}};
  // The projection: wp [O, 1..., C] over channels-last x.
  for (int64_t d : x) {
    if (d == kDynamic) fail("a projection needs static shapes, got ", shape_to_string(x));
  }
  const Shape& wp = in[excitation].shape;
  if (wp.size() != x.size() || wp[0] < 1 ||
      std::any_of(wp.begin() + 1, wp.end() - 1, [](int64_t d) { return d != 1; }) ||
      wp.back() != c) {
    fail("projection weights ", shape_to_string(wp), " are not [O, 1..., ", c,
         "] (a 1x1 convolution's, channels-last)");
  }
  Shape y = x;
  y.back() = wp[0];
  if (p.projection.has_bias && volume(in[excitation + 1].shape) != wp[0]) {
    fail("projection bias ", shape_to_string(in[excitation + 1].shape), " needs ", wp[0],
         " values");
  }
  if (p.projection.has_residual && in.back().shape != y) {
    fail("projection residual ", shape_to_string(in.back().shape), " is not the output's shape ",
         shape_to_string(y));
  }
  return {{in[0].dtype, y}};
}

}  // namespace kiln::engine
