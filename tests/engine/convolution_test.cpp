// Convolution on the CPU backend against a float64 reference: 1-3-D, stride, asymmetric
// padding, dilation, groups/depthwise, transposed with output_padding, post-ops, f16/bf16.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;
using testing::run_one_layer;

std::vector<int64_t> get(const std::vector<int64_t>& v, size_t nd, int64_t fallback) {
  return v.empty() ? std::vector<int64_t>(nd, fallback) : v;
}

// Torch's conv{1,2,3}d / conv_transpose{1,2,3}d (asymmetric padding) as plain float64 loops;
// the transposed form scatters each input element through the kernel.
std::vector<double> reference(const HostTensor& x, const HostTensor& w, const ConvolutionParams& p,
                              const Shape& out_shape, const HostTensor* bias,
                              const HostTensor* residual) {
  const auto xv = testing::to_doubles(x), wv = testing::to_doubles(w);
  const size_t nd = x.shape().size() - 2;
  const auto s = get(p.strides, nd, 1), pb = get(p.padding_begin, nd, 0);
  const auto dil = get(p.dilations, nd, 1);
  const Shape xs = x.shape(), ws = w.shape();
  const int64_t g = p.groups, n = xs[0], c = xs[1], o = out_shape[1];
  const int64_t cg = c / g, og = o / g;
  const Shape in_sp(xs.begin() + 2, xs.end()), k_sp(ws.begin() + 2, ws.end()),
      out_sp(out_shape.begin() + 2, out_shape.end());
  std::vector<double> r(static_cast<size_t>(volume(out_shape)), 0.0);
  auto out_at = [&](int64_t b, int64_t ch, const std::vector<int64_t>& pos) -> double* {
    for (size_t d = 0; d < nd; ++d) {
      if (pos[d] < 0 || pos[d] >= out_sp[d]) return nullptr;
    }
    return &r[static_cast<size_t>((b * o + ch) * volume(out_sp) +
                                  testing::flat_index(out_sp, pos))];
  };
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ci = 0; ci < c; ++ci) {
      const int64_t grp = ci / cg;
      for (int64_t ip = 0; ip < volume(in_sp); ++ip) {
        const auto ii = testing::unflatten(in_sp, ip);
        const double xval = xv[static_cast<size_t>((b * c + ci) * volume(in_sp) + ip)];
        for (int64_t oo = 0; oo < og; ++oo) {
          for (int64_t kp = 0; kp < volume(k_sp); ++kp) {
            const auto kk = testing::unflatten(k_sp, kp);
            std::vector<int64_t> pos(nd);
            bool hit = true;
            for (size_t d = 0; d < nd; ++d) {
              if (p.transposed) {
                pos[d] = ii[d] * s[d] - pb[d] + kk[d] * dil[d];
              } else {  // input position ii feeds output pos if ii = pos*s - pb + kk*dil
                const int64_t num = ii[d] + pb[d] - kk[d] * dil[d];
                hit = hit && num >= 0 && num % s[d] == 0;
                pos[d] = num / s[d];
              }
            }
            double* dst = hit ? out_at(b, grp * og + oo, pos) : nullptr;
            if (!dst) continue;
            const int64_t widx = p.transposed
                                     ? (ci * og + oo) * volume(k_sp) + kp
                                     : ((grp * og + oo) * cg + ci % cg) * volume(k_sp) + kp;
            *dst += xval * wv[static_cast<size_t>(widx)];
          }
        }
      }
    }
  }
  const auto bv = bias ? testing::to_doubles(*bias) : std::vector<double>{};
  const auto rv = residual ? testing::to_doubles(*residual) : std::vector<double>{};
  for (size_t i = 0; i < r.size(); ++i) {
    const int64_t ch = (static_cast<int64_t>(i) / volume(out_sp)) % o;
    if (bias) r[i] += bv[static_cast<size_t>(ch)];
    if (p.post.activation == ActivationKind::kRelu) r[i] = std::max(r[i], 0.0);
    if (residual) r[i] += rv[i];
    if (p.post.activation2 == ActivationKind::kRelu) r[i] = std::max(r[i], 0.0);
  }
  return r;
}

struct Case {
  Shape x, w, out;
  ConvolutionParams p;
};

ConvolutionParams conv(std::vector<int64_t> s, std::vector<int64_t> pb, std::vector<int64_t> pe,
                       std::vector<int64_t> d, int64_t groups = 1, bool transposed = false,
                       std::vector<int64_t> op = {}) {
  ConvolutionParams p;
  p.strides = std::move(s);
  p.padding_begin = std::move(pb);
  p.padding_end = std::move(pe);
  p.dilations = std::move(d);
  p.groups = groups;
  p.transposed = transposed;
  p.output_padding = std::move(op);
  return p;
}

// Sums of up to a few hundred products of values in [-2, 2): fp32 accumulation in a different
// order than the reference costs up to ~1e-5 absolute, so atol is 1e-4 (rtol stays 1e-5).
constexpr double kRtol = 1e-5, kAtol = 1e-4;

void check(const Case& c, DataType t = DataType::kF32, double rtol = kRtol, double atol = kAtol) {
  auto x = random_tensor(t, c.x, 1), w = random_tensor(t, c.w, 2);
  auto out = run_one_layer(c.p, {x, w});
  ASSERT_EQ(out[0].shape(), c.out) << shape_to_string(c.x) << " * " << shape_to_string(c.w);
  EXPECT_EQ(out[0].dtype(), t);
  EXPECT_TRUE(near(out[0], reference(x, w, c.p, c.out, nullptr, nullptr), rtol, atol))
      << shape_to_string(c.x) << " * " << shape_to_string(c.w);
}

TEST(Convolution, ForwardF32) {
  const Case cases[] = {
      {{2, 3, 10}, {4, 3, 3}, {2, 4, 8}, {}},
      {{1, 4, 11}, {6, 2, 3}, {1, 6, 5}, conv({2}, {1}, {0}, {1}, 2)},
      {{2, 3, 7, 6}, {5, 3, 3, 2}, {2, 5, 7, 8}, conv({1, 1}, {1, 1}, {1, 2}, {1, 1})},
      {{1, 4, 9, 9}, {4, 1, 3, 3}, {1, 4, 5, 5}, conv({2, 2}, {1, 1}, {1, 1}, {1, 1}, 4)},
      {{1, 2, 12, 10}, {3, 2, 3, 3}, {1, 3, 8, 2}, conv({1, 3}, {0, 0}, {0, 0}, {2, 3})},
      {{1, 6, 8, 8}, {6, 2, 1, 1}, {1, 6, 8, 8}, conv({1, 1}, {}, {}, {}, 3)},
      {{2, 2, 5, 4, 6},
       {3, 2, 3, 2, 3},
       {2, 3, 2, 3, 3},
       conv({2, 1, 2}, {1, 0, 1}, {0, 0, 0}, {1, 1, 1})},
      {{0, 3, 5, 5}, {2, 3, 3, 3}, {0, 2, 3, 3}, {}},
      {{1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}, {}},
      {{1, 16, 14, 14}, {32, 16, 3, 3}, {1, 32, 14, 14}, conv({1, 1}, {1, 1}, {1, 1}, {1, 1})},
  };
  for (const auto& c : cases) check(c);
}

TEST(Convolution, TransposedF32) {
  const Case cases[] = {
      {{1, 3, 5}, {3, 2, 3}, {1, 2, 7}, conv({}, {}, {}, {}, 1, true)},
      {{2, 4, 5}, {4, 3, 3}, {2, 6, 10}, conv({2}, {1}, {1}, {1}, 2, true, {1})},
      {{1, 2, 4, 3},
       {2, 3, 3, 3},
       {1, 3, 8, 9},
       conv({2, 3}, {1, 0}, {1, 2}, {1, 1}, 1, true, {1, 2})},
      {{1, 4, 3, 3},
       {4, 1, 2, 2},
       {1, 4, 8, 5},
       conv({2, 2}, {0, 0}, {0, 1}, {2, 1}, 4, true, {1, 0})},
      {{1, 2, 3, 2, 2},
       {2, 2, 2, 2, 2},
       {1, 2, 6, 4, 5},
       conv({2, 2, 2}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 1, true, {0, 0, 1})},
  };
  for (const auto& c : cases) check(c);
}

TEST(Convolution, PostOpsBiasReluResidual) {
  for (bool transposed : {false, true}) {
    ConvolutionParams p = conv({2, 1}, {1, 1}, {1, 1}, {1, 1}, 2, transposed);
    p.post.has_bias = true;
    p.post.activation = ActivationKind::kRelu;
    p.post.has_residual = true;
    p.post.activation2 = ActivationKind::kRelu;
    const Shape xs = {2, 4, 6, 5}, ws = transposed ? Shape{4, 3, 3, 3} : Shape{6, 2, 3, 3};
    const Shape out = transposed ? Shape{2, 6, 11, 5} : Shape{2, 6, 3, 5};
    auto x = random_tensor(DataType::kF32, xs, 3), w = random_tensor(DataType::kF32, ws, 4);
    auto bias = random_tensor(DataType::kF32, {6}, 5), res = random_tensor(DataType::kF32, out, 6);
    auto got = run_one_layer(p, {x, w, bias, res});
    ASSERT_EQ(got[0].shape(), out);
    EXPECT_TRUE(near(got[0], reference(x, w, p, out, &bias, &res), kRtol, kAtol)) << transposed;
  }
}

// The activations oneDNN runs inside the convolution (onednn::eltwise_for) against the same
// convolution without one, activated afterwards by activate() (scalar_ops.h), the definition
// every backend follows, with NaN and infinities among the inputs: the same values, bit for bit
// where the activation is exact, and NaN where it gives NaN, but for ReLU and clamps with a lower
// bound, which give that bound for NaN (onednn.h says why). Shapes that take each of oneDNN's
// kinds of kernel here (1x1, 3x3, depthwise), in both data layouts; activations that stay in
// finish() (hard sigmoid, mish, a clamp with no lower bound) are here too.
TEST(Convolution, FusedActivationsMatchActivate) {
  constexpr double kInf = std::numeric_limits<double>::infinity(), kKeep = std::nan("");
  using K = ActivationKind;
  // Tolerances 2e-6 relative, 1e-6 absolute: oneDNN's exp and erf approximations.
  const std::vector<testing::FusedActivation> acts = {{K::kRelu, 0, 0, 0, 0},
                                                      {K::kLeakyRelu, 0.1, 0, kKeep, 0},
                                                      {K::kClamp, 0, 6, 0, 0},
                                                      {K::kClamp, -1.5, 2.5, -1.5, 0},
                                                      {K::kClamp, 0, kInf, 0, 0},
                                                      {K::kClamp, -kInf, 2.5, kKeep, 0},
                                                      {K::kHardSwish},
                                                      {K::kHardSigmoid},
                                                      {K::kSilu},
                                                      {K::kSigmoid},
                                                      {K::kTanh},
                                                      {K::kGelu},
                                                      {K::kGeluTanh},
                                                      {K::kElu, 1.0},
                                                      {K::kMish}};
  struct Form {
    Shape x, w;  // channels first
    int64_t groups, pad;
  };
  const Form forms[] = {{{1, 16, 9, 9}, {24, 16, 1, 1}, 1, 0},
                        {{1, 8, 9, 9}, {16, 8, 3, 3}, 1, 1},
                        {{1, 16, 9, 9}, {16, 1, 3, 3}, 16, 1}};
  const auto last = [](const Shape& s) { return Shape{s[0], s[2], s[3], s[1]}; };
  for (const Form& f : forms) {
    for (bool cl : {false, true}) {
      auto x = random_tensor(DataType::kF32, cl ? last(f.x) : f.x, 11, -3, 3);
      auto w = random_tensor(DataType::kF32, cl ? last(f.w) : f.w, 12);
      auto bias = random_tensor(DataType::kF32, {f.w[0]}, 13);
      float* xv = x.as<float>();
      xv[5] = std::nanf("");
      xv[x.numel() / 2] = std::numeric_limits<float>::infinity();
      xv[x.numel() - 7] = -std::numeric_limits<float>::infinity();
      ConvolutionParams p = conv({1, 1}, {f.pad, f.pad}, {f.pad, f.pad}, {1, 1}, f.groups);
      p.channels_last = cl;
      p.post.has_bias = true;
      testing::expect_fused_activations(p, {x, w, bias}, acts,
                                        shape_to_string(f.w) + (cl ? " channels last" : ""));
    }
  }
}

// The shapes of ConvertConvolution.GroupsDilationDepthwise and
// TransposedWithOutputPaddingGroupsDilation (tests/conversion), which failed on AVX-512 machines
// only: grouped + dilated with bias, depthwise with channel multiplier 2, and transposed with
// output_padding (negative end padding for oneDNN), groups and dilation.
TEST(Convolution, GroupedDilatedDepthwiseAndTransposedAsTheConverterTests) {
  struct BiasCase {
    Case c;
    bool bias;
  };
  std::vector<BiasCase> cases = {
      {{{2, 6, 12, 10}, {4, 3, 3, 3}, {2, 4, 12, 8}, conv({1, 1}, {2, 2}, {2, 2}, {2, 3}, 2)},
       true},
      {{{2, 6, 12, 10}, {12, 1, 3, 3}, {2, 12, 12, 10}, conv({1, 1}, {1, 1}, {1, 1}, {1, 1}, 6)},
       false},
      {{{2, 3, 7}, {3, 5, 4}, {2, 5, 22}, conv({3}, {1}, {1}, {1}, 1, true, {2})}, true},
      {{{1, 2, 3, 4, 3},
        {2, 3, 2, 3, 3},
        {1, 3, 7, 4, 5},
        conv({2, 1, 2}, {0, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1, true, {1, 0, 0})},
       true},
  };
  for (int64_t batch : {1, 4}) {
    cases.push_back({{{batch, 4, 5, 6},
                      {4, 3, 3, 3},
                      {batch, 3, 10, 14},
                      conv({2, 2}, {1, 0}, {1, 0}, {1, 1}, 1, true, {1, 1})},
                     true});
    cases.push_back({{{batch, 4, 5, 6},
                      {4, 2, 3, 2},
                      {batch, 4, 11, 16},
                      conv({2, 3}, {1, 1}, {1, 1}, {2, 1}, 2, true, {0, 1})},
                     true});
  }
  uint64_t seed = 10;
  for (auto& [c, with_bias] : cases) {
    ConvolutionParams p = c.p;
    p.post.has_bias = with_bias;
    auto x = random_tensor(DataType::kF32, c.x, seed++),
         w = random_tensor(DataType::kF32, c.w, seed++);
    auto bias = random_tensor(DataType::kF32, {c.out[1]}, seed++);
    std::vector<HostTensor> inputs = {x, w};
    if (with_bias) inputs.push_back(bias);
    const std::string what = shape_to_string(c.x) + " * " + shape_to_string(c.w);
    std::vector<HostTensor> got;
    try {
      got = run_one_layer(p, inputs);
    } catch (const Error& e) {
      ADD_FAILURE() << what << ": " << e.what();
      continue;
    }
    ASSERT_EQ(got[0].shape(), c.out) << what;
    EXPECT_TRUE(
        near(got[0], reference(x, w, p, c.out, with_bias ? &bias : nullptr, nullptr), kRtol, kAtol))
        << what;
  }
}

Weights as_weights(const HostTensor& t) {
  const auto* bytes = static_cast<const uint8_t*>(t.data());
  return Weights::from_bytes(t.dtype(), t.shape(), std::vector<uint8_t>(bytes, bytes + t.nbytes()));
}

// Weights are reordered once and cached: an engine constant is keyed by its address, and a
// weight input by its contents, so new contents at the same address must be picked up.
TEST(Convolution, ConstantWeightsAreCachedAndWeightInputsFollowTheirContents) {
  const Case c{{1, 4, 9, 8}, {6, 2, 3, 3}, {1, 6, 9, 8}, conv({1, 1}, {1, 1}, {1, 1}, {1, 1}, 2)};
  for (DataType t : {DataType::kF32, DataType::kF16}) {
    const auto w = random_tensor(t, c.w, 20);
    Network net;
    auto x = net.add_input("x", t, c.x);
    net.mark_output(net.add("conv", c.p, {x, net.add_constant("w", as_weights(w))}));
    ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
    for (uint64_t seed : {21, 22}) {
      const auto xv = random_tensor(t, c.x, seed);
      const auto expected = reference(xv, w, c.p, c.out, nullptr, nullptr);
      EXPECT_TRUE(near(ctx.run({xv})[0], expected, t == DataType::kF32 ? kRtol : 2e-3,
                       t == DataType::kF32 ? kAtol : 1e-2))
          << dtype_name(t) << " run " << seed;
    }
  }
  Network net;
  auto x = net.add_input("x", DataType::kF32, c.x);
  auto w = net.add_input("w", DataType::kF32, c.w);
  net.mark_output(net.add("conv", c.p, {x, w}));
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  const auto xv = random_tensor(DataType::kF32, c.x, 23);
  HostTensor wv(DataType::kF32, c.w), out(DataType::kF32, c.out);
  ctx.bind_input(0, xv.data());
  ctx.bind_input(1, wv.data());
  ctx.bind_output(0, out.data());
  for (uint64_t seed : {24, 25}) {
    const auto fresh = random_tensor(DataType::kF32, c.w, seed);
    std::copy(fresh.as<float>(), fresh.as<float>() + fresh.numel(), wv.as<float>());
    ctx.execute();
    EXPECT_TRUE(near(out, reference(xv, wv, c.p, c.out, nullptr, nullptr), kRtol, kAtol))
        << "weights " << seed;
  }
}

TEST(Convolution, HalfAndBfloat16) {
  const Case c{{1, 4, 6, 6}, {4, 2, 3, 3}, {1, 4, 4, 4}, conv({}, {}, {}, {}, 2)};
  check(c, DataType::kF16, 2e-3, 1e-2);
  check(c, DataType::kBF16, 1e-2, 5e-2);
}

template <class E>
void expect_error(Network& net, const ConvolutionParams& p, const std::vector<TensorId>& in) {
  try {
    net.add("bad_conv", p, in);
    FAIL() << "no error";
  } catch (const E& e) {
    EXPECT_NE(e.message().find("bad_conv"), std::string::npos) << e.message();
  }
}

TEST(Convolution, InvalidInputsAreRejectedWithTheLayerName) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {1, 4, 8, 8});
  auto x3 = net.add_input("x3", DataType::kF32, {4, 8, 8});
  auto w = net.add_input("w", DataType::kF32, {6, 4, 3, 3});
  auto w_g = net.add_input("wg", DataType::kF32, {6, 3, 3, 3});
  auto w_big = net.add_input("wb", DataType::kF32, {6, 4, 9, 9});
  auto h = net.add_input("h", DataType::kF16, {6, 4, 3, 3});
  auto xi = net.add_input("xi", DataType::kI32, {1, 4, 8, 8});
  auto wi = net.add_input("wi", DataType::kI32, {6, 4, 3, 3});
  auto bias = net.add_input("bias", DataType::kF32, {5});
  expect_error<InvalidArgument>(net, {}, {x3, w});                       // rank
  expect_error<ShapeMismatch>(net, {}, {x, w_g});                        // channels
  expect_error<ShapeMismatch>(net, conv({}, {}, {}, {}, 4), {x, w});     // 6 % 4 groups
  expect_error<InvalidArgument>(net, {}, {x, h});                        // dtype
  expect_error<InvalidArgument>(net, {}, {xi, wi});                      // integer
  expect_error<ShapeMismatch>(net, {}, {x, w_big});                      // empty output
  expect_error<InvalidArgument>(net, conv({0, 1}, {}, {}, {}), {x, w});  // stride 0
  expect_error<InvalidArgument>(net, conv({1}, {}, {}, {}), {x, w});     // param count
  expect_error<InvalidArgument>(net, conv({}, {}, {}, {}, 1, true, {2, 2}), {x, w});  // op >= s
  ConvolutionParams with_bias;
  with_bias.post.has_bias = true;
  expect_error<ShapeMismatch>(net, with_bias, {x, w, bias});
  expect_error<InvalidArgument>(net, with_bias, {x, w});
}

TEST(Convolution, DynamicDimsInferSymbolically) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 3, kDynamic, 8},
                         Profile{{1, 3, 4, 8}, {2, 3, 8, 8}, {4, 3, 16, 8}});
  auto w = net.add_input("w", DataType::kF32, {5, 3, 3, 3});
  auto y = net.add("conv", conv({2, 2}, {1, 1}, {1, 1}, {1, 1}), {x, w});
  EXPECT_EQ(net.tensor(y).shape, (Shape{kDynamic, 5, kDynamic, 4}));
}

}  // namespace
}  // namespace kiln::engine
