// Pooling on the CPU backend against a float64 reference: max/average, 1-3-D, stride, padding,
// dilation, ceil_mode, count_include_pad, adaptive (divisible and not), channels-last, NaN,
// f16/bf16, bad input.
#include <cmath>
#include <limits>

#include "engine/scalar_ops.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;
using testing::run_one_layer;

std::vector<int64_t> get(const std::vector<int64_t>& v, size_t i, int64_t fallback) {
  return v.empty() ? std::vector<int64_t>(i, fallback) : v;
}

// Torch's max_pool / avg_pool / adaptive_*_pool over the trailing dims, as float64 loops that
// visit every kernel tap and test it against the input bounds.
std::vector<double> reference(const HostTensor& x, const PoolingParams& p, const Shape& out) {
  const auto xv = testing::to_doubles(x);
  const size_t nd = p.adaptive ? p.output_size.size() : p.kernel.size();
  const size_t lead = out.size() - nd;
  const Shape in_sp(x.shape().begin() + static_cast<std::ptrdiff_t>(lead), x.shape().end());
  const Shape out_sp(out.begin() + static_cast<std::ptrdiff_t>(lead), out.end());
  const auto s = p.adaptive ? std::vector<int64_t>{} : get(p.strides, nd, 0);
  const auto pb = get(p.padding_begin, nd, 0), pe = get(p.padding_end, nd, 0);
  const auto dil = get(p.dilations, nd, 1);
  std::vector<double> r(static_cast<size_t>(volume(out)));
  const int64_t planes = volume(out) / std::max<int64_t>(1, volume(out_sp));
  for (int64_t b = 0; b < planes; ++b) {
    for (int64_t op = 0; op < volume(out_sp); ++op) {
      const auto oi = testing::unflatten(out_sp, op);
      std::vector<int64_t> first(nd), taps(nd), step(nd);
      double padded = 1;
      for (size_t d = 0; d < nd; ++d) {
        if (p.adaptive) {
          first[d] = static_cast<int64_t>(std::floor(double(oi[d] * in_sp[d]) / out_sp[d]));
          const auto end =
              static_cast<int64_t>(std::ceil(double((oi[d] + 1) * in_sp[d]) / out_sp[d]));
          taps[d] = end - first[d];
          step[d] = 1;
        } else {
          const int64_t stride = s[d] ? s[d] : p.kernel[d];
          first[d] = oi[d] * stride - pb[d];
          taps[d] = p.kernel[d];
          step[d] = dil[d];
          padded *=
              static_cast<double>(std::min(first[d] + p.kernel[d], in_sp[d] + pe[d]) - first[d]);
        }
      }
      double mx = -std::numeric_limits<double>::infinity(), sum = 0, count = 0;
      const Shape tap_shape(taps.begin(), taps.end());
      for (int64_t t = 0; t < volume(tap_shape); ++t) {
        const auto ti = testing::unflatten(tap_shape, t);
        std::vector<int64_t> pos(nd);
        bool inside = true;
        for (size_t d = 0; d < nd; ++d) {
          pos[d] = first[d] + ti[d] * step[d];
          inside = inside && pos[d] >= 0 && pos[d] < in_sp[d];
        }
        if (!inside) continue;
        const double v =
            xv[static_cast<size_t>(b * volume(in_sp) + testing::flat_index(in_sp, pos))];
        if (v > mx || std::isnan(v)) mx = v;  // NaN wins, as in torch
        sum += v;
        count += 1;
      }
      const double divisor = (p.count_include_pad && !p.adaptive) ? padded : count;
      r[static_cast<size_t>(b * volume(out_sp) + op)] =
          p.kind == PoolingKind::kMax ? mx : sum / divisor;
    }
  }
  return r;
}

PoolingParams pool(PoolingKind kind, std::vector<int64_t> k, std::vector<int64_t> s = {},
                   std::vector<int64_t> pb = {}, std::vector<int64_t> pe = {},
                   std::vector<int64_t> d = {}, bool ceil_mode = false, bool include_pad = true) {
  PoolingParams p;
  p.kind = kind;
  p.kernel = std::move(k);
  p.strides = std::move(s);
  p.padding_begin = std::move(pb);
  p.padding_end = std::move(pe);
  p.dilations = std::move(d);
  p.ceil_mode = ceil_mode;
  p.count_include_pad = include_pad;
  return p;
}
PoolingParams adaptive(PoolingKind kind, std::vector<int64_t> size) {
  PoolingParams p;
  p.kind = kind;
  p.adaptive = true;
  p.output_size = std::move(size);
  return p;
}

struct Case {
  Shape x, out;
  PoolingParams p;
};

void check(const Case& c, DataType t = DataType::kF32, double rtol = 1e-6, double atol = 1e-6) {
  auto x = random_tensor(t, c.x, 7);
  auto out = run_one_layer(c.p, {x});
  ASSERT_EQ(out[0].shape(), c.out) << shape_to_string(c.x);
  EXPECT_EQ(out[0].dtype(), t);
  EXPECT_TRUE(near(out[0], reference(x, c.p, c.out), rtol, atol)) << shape_to_string(c.x);
}

constexpr auto kMax = PoolingKind::kMax;
constexpr auto kAvg = PoolingKind::kAverage;

TEST(Pooling, MaxWindowsF32) {
  const Case cases[] = {
      {{2, 3, 10}, {2, 3, 5}, pool(kMax, {2})},
      {{1, 2, 9, 9}, {1, 2, 4, 4}, pool(kMax, {3, 3}, {2, 2})},
      {{1, 2, 9, 8}, {1, 2, 5, 4}, pool(kMax, {3, 3}, {2, 2}, {1, 1}, {1, 0})},
      {{1, 1, 10, 10}, {1, 1, 3, 8}, pool(kMax, {3, 2}, {3, 1}, {1, 0}, {1, 1}, {2, 3})},
      {{2, 2, 7, 7}, {2, 2, 4, 4}, pool(kMax, {2, 2}, {2, 2}, {}, {}, {}, true)},
      {{1, 2, 6, 6}, {1, 2, 4, 4}, pool(kMax, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {}, true)},
      {{1, 1, 5, 6, 7}, {1, 1, 3, 3, 4}, pool(kMax, {2, 2, 2}, {2, 2, 2}, {}, {}, {}, true)},
      {{3, 8, 8}, {3, 4, 4}, pool(kMax, {2, 2})},  // unbatched
      {{0, 2, 4, 4}, {0, 2, 2, 2}, pool(kMax, {2, 2})},
      {{1, 1, 1, 1}, {1, 1, 1, 1}, pool(kMax, {1, 1})},
  };
  for (const auto& c : cases) check(c);
}

TEST(Pooling, AverageWindowsF32) {
  const Case cases[] = {
      {{2, 3, 10}, {2, 3, 4}, pool(kAvg, {3}, {2}, {0}, {0})},
      {{1, 2, 8, 8}, {1, 2, 4, 4}, pool(kAvg, {3, 3}, {2, 2}, {1, 1}, {1, 1})},
      {{1, 2, 8, 8}, {1, 2, 4, 4}, pool(kAvg, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {}, false, false)},
      {{1, 2, 7, 7}, {1, 2, 4, 4}, pool(kAvg, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {}, true, true)},
      {{1, 2, 6, 6}, {1, 2, 4, 4}, pool(kAvg, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {}, true, false)},
      {{1, 1, 7, 5}, {1, 1, 3, 3}, pool(kAvg, {2, 2}, {3, 2}, {1, 1}, {0, 1}, {}, true, true)},
      {{2, 1, 4, 6, 5}, {2, 1, 2, 3, 2}, pool(kAvg, {2, 2, 2})},
  };
  for (const auto& c : cases) check(c);
}

TEST(Pooling, AdaptiveF32) {
  const Case cases[] = {
      {{2, 3, 7, 9}, {2, 3, 1, 1}, adaptive(kAvg, {1, 1})},
      {{2, 3, 7, 9}, {2, 3, 1, 1}, adaptive(kMax, {1, 1})},
      {{1, 2, 10, 7}, {1, 2, 3, 4}, adaptive(kAvg, {3, 4})},  // non-divisible: overlapping
      {{1, 2, 10, 7}, {1, 2, 3, 4}, adaptive(kMax, {3, 4})},
      {{1, 2, 3, 3}, {1, 2, 5, 7}, adaptive(kAvg, {5, 7})},  // upsampling windows
      {{2, 5, 11}, {2, 5, 4}, adaptive(kAvg, {4})},
      {{1, 1, 5, 6, 7}, {1, 1, 2, 3, 3}, adaptive(kAvg, {2, 3, 3})},
      {{1, 64, 56, 56}, {1, 64, 1, 1}, adaptive(kAvg, {1, 1})},
  };
  for (const auto& c : cases) check(c);
}

TEST(Pooling, MaxPropagatesNaN) {
  auto x = testing::tensor_from(DataType::kF32, {1, 1, 4}, {1, NAN, 3, 2});
  auto out = run_one_layer(pool(kMax, {2}), {x})[0];
  EXPECT_TRUE(near(out, {NAN, 3}, 0, 0));
}

// NaNs inside 2-d windows: in the rows' edge windows, the evenly spaced ones, and every pass.
TEST(Pooling, MaxPropagatesNaNThroughEveryPass) {
  const Shape shape = {2, 3, 9, 11};
  auto values = testing::to_doubles(random_tensor(DataType::kF32, shape, 3));
  for (size_t i : {0ul, 40ul, 200ul, 351ul, values.size() - 1}) values[i] = NAN;
  const auto x = testing::tensor_from(DataType::kF32, shape, values);
  for (const PoolingParams& p : {pool(kMax, {3, 3}, {1, 1}, {1, 1}, {1, 1}),
                                 pool(kMax, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {}, true)}) {
    const auto out = run_one_layer(p, {x})[0];
    EXPECT_TRUE(near(out, reference(x, p, out.shape()), 0, 0));
  }
}

// Values of an [N, C, H, W] tensor laid out as [N, H, W, C].
std::vector<double> to_nhwc(const std::vector<double>& v, const Shape& nchw) {
  const int64_t c = nchw[1], h = nchw[2], w = nchw[3];
  std::vector<double> r(v.size());
  for (int64_t i = 0; i < volume(nchw); ++i) {
    const int64_t b = i / (c * h * w), ch = i / (h * w) % c, y = i / w % h, xx = i % w;
    r[static_cast<size_t>(((b * h + y) * w + xx) * c + ch)] = v[static_cast<size_t>(i)];
  }
  return r;
}

// Channels-last 2-d max pooling (its own kernel: one pass over each output pixel's window, vectors
// over the channels) against the reference on the channels-first data: NaN in whole vectors and in
// the channel tail (19 channels), padding, dilation, ceil mode, and a window of one tap; f16 too.
TEST(Pooling, ChannelsLastMaxMatchesTheReferenceNaNIncluded) {
  const int64_t n = 2, c = 19, h = 10, w = 9;
  auto values = testing::to_doubles(random_tensor(DataType::kF32, {n, c, h, w}, 17));
  for (size_t i : {0ul, 93ul, 200ul, 1333ul, values.size() - 1}) values[i] = NAN;
  const auto x = testing::tensor_from(DataType::kF32, {n, c, h, w}, values);
  const auto nhwc = to_nhwc(values, {n, c, h, w});
  const auto x_cl = testing::tensor_from(DataType::kF32, {n, h, w, c}, nhwc);
  for (PoolingParams p :
       {pool(kMax, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {}, true),
        pool(kMax, {2, 3}, {1, 2}, {0, 1}, {0, 1}, {2, 1}), pool(kMax, {1, 1}, {2, 2}),
        pool(kMax, {4, 4}, {4, 4}, {}, {}, {}, true)}) {
    const auto ref = run_one_layer(p, {x})[0];  // the separable passes, channels first
    const Shape& o = ref.shape();
    const auto expected = reference(x, p, o);
    EXPECT_TRUE(near(ref, expected, 0, 0));
    const auto want = to_nhwc(expected, o);
    p.channels_last = true;
    const auto out = run_one_layer(p, {x_cl})[0];
    ASSERT_EQ(out.shape(), (Shape{o[0], o[2], o[3], o[1]}));
    EXPECT_TRUE(near(out, want, 0, 0));
    // f16 data (staged through f32 and back): the f32 result of the same values, exactly.
    const auto x16 = testing::tensor_from(DataType::kF16, x_cl.shape(), nhwc);
    const auto out16 = run_one_layer(p, {x16})[0];
    EXPECT_EQ(out16.dtype(), DataType::kF16);
    const auto same32 = run_one_layer(
        p, {testing::tensor_from(DataType::kF32, x16.shape(), testing::to_doubles(x16))})[0];
    EXPECT_TRUE(near(out16, testing::to_doubles(same32), 0, 0));
  }
}

// Channels-last pooling ([N, H, W, C]) gives the channels-first result, transposed.
TEST(Pooling, ChannelsLastMatchesChannelsFirst) {
  const int64_t n = 2, c = 5, h = 9, w = 7;
  const auto x = random_tensor(DataType::kF32, {n, c, h, w}, 11);
  const auto xv = testing::to_doubles(x);
  const auto nhwc = to_nhwc(xv, {n, c, h, w});
  const auto x_cl = testing::tensor_from(DataType::kF32, {n, h, w, c}, nhwc);
  for (PoolingParams p :
       {pool(kMax, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {}, true),
        pool(kAvg, {3, 2}, {1, 2}, {1, 0}, {1, 0}, {}, false, false), adaptive(kAvg, {3, 2})}) {
    const auto ref = run_one_layer(p, {x})[0];
    const Shape& o = ref.shape();
    const auto want = to_nhwc(testing::to_doubles(ref), o);
    p.channels_last = true;
    const auto out = run_one_layer(p, {x_cl})[0];
    EXPECT_EQ(out.shape(), (Shape{o[0], o[2], o[3], o[1]}));
    EXPECT_TRUE(near(out, want, 1e-6, 1e-6));
  }
}

TEST(Pooling, HalfAndBfloat16) {
  const Case avg{{1, 2, 9, 9}, {1, 2, 5, 5}, pool(kAvg, {3, 3}, {2, 2}, {1, 1}, {1, 1})};
  const Case ad{{1, 2, 10, 7}, {1, 2, 3, 4}, adaptive(kMax, {3, 4})};
  for (const Case* c : {&avg, &ad}) {
    check(*c, DataType::kF16, 2e-3, 1e-3);
    check(*c, DataType::kBF16, 1e-2, 1e-2);
  }
}

template <class E>
void expect_error(Network& net, const PoolingParams& p, TensorId x) {
  try {
    net.add("bad_pool", p, {x});
    FAIL() << "no error";
  } catch (const E& e) {
    EXPECT_NE(e.message().find("bad_pool"), std::string::npos) << e.message();
  }
}

TEST(Pooling, InvalidInputsAreRejectedWithTheLayerName) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {1, 2, 8, 8});
  auto v = net.add_input("v", DataType::kF32, {8});
  auto i = net.add_input("i", DataType::kI64, {1, 2, 8, 8});
  auto e = net.add_input("e", DataType::kF32, {1, 2, 0, 8});
  expect_error<InvalidArgument>(net, pool(kMax, {2, 2}), v);              // rank
  expect_error<InvalidArgument>(net, pool(kMax, {2, 2}), i);              // dtype
  expect_error<InvalidArgument>(net, pool(kMax, {}), x);                  // no kernel
  expect_error<InvalidArgument>(net, pool(kMax, {2, 2}, {2}), x);         // stride count
  expect_error<InvalidArgument>(net, pool(kMax, {2, 2}, {}, {2, 2}), x);  // pad > k/2
  expect_error<ShapeMismatch>(net, pool(kMax, {9, 9}), x);                // kernel > input
  expect_error<Unsupported>(net, pool(kAvg, {2, 2}, {}, {}, {}, {2, 2}), x);
  expect_error<ShapeMismatch>(net, adaptive(kAvg, {2, 2}), e);
  expect_error<InvalidArgument>(net, adaptive(kAvg, {-1, 2}), x);
}

// The squeeze-excitation layer checks its operands: w1 [S, C...], w2 [C, S...], biases of S and
// C values, one dtype, a batch, channel and spatial dim; the error names the layer.
TEST(Pooling, SqueezeExcitationRejectsMismatchedOperands) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 6, 4, 4});
  auto w1 = net.add_input("w1", DataType::kF32, {3, 6, 1, 1});
  auto b1 = net.add_input("b1", DataType::kF32, {3});
  auto w2 = net.add_input("w2", DataType::kF32, {6, 3, 1, 1});
  auto b2 = net.add_input("b2", DataType::kF32, {6});
  auto w2_bad = net.add_input("w2_bad", DataType::kF32, {5, 3, 1, 1});
  auto b1_bad = net.add_input("b1_bad", DataType::kF32, {4});
  auto w1_half = net.add_input("w1_half", DataType::kF16, {3, 6, 1, 1});
  auto flat = net.add_input("flat", DataType::kF32, {2, 6});
  SqueezeExcitationParams p;
  p.activation1 = ActivationKind::kSilu;
  p.has_bias1 = p.has_bias2 = true;
  EXPECT_EQ(net.tensor(net.add("se", p, {x, w1, b1, w2, b2})).shape, (Shape{2, 6, 4, 4}));
  const auto expect_error = [&](const std::vector<TensorId>& inputs, const char* what) {
    try {
      net.add("bad_se", p, inputs);
      ADD_FAILURE() << what << ": no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(e.message().find("bad_se"), std::string::npos) << e.message();
    }
  };
  expect_error({x, w1, b1, w2_bad, b2}, "w2 of 5 channels");
  expect_error({x, w1, b1_bad, w2, b2}, "b1 of 4 values");
  expect_error({x, w1_half, b1, w2, b2}, "an f16 w1");
  expect_error({flat, w1, b1, w2, b2}, "no spatial dim");
  expect_error({x, w1, w2, b2}, "a missing bias");
  // S * C past 2^48 (a hostile plan's w1 [2^47, 1, 1, 1] on 6 channels) is an error, not an
  // overflow.
  auto w1_huge = net.add_input("w1_huge", DataType::kF32, {int64_t{1} << 47, 1, 1, 1});
  expect_error({x, w1_huge, b1, w2, b2}, "S * C past 2^48");
}

// With its projection (cuda plans' form) the layer checks the projection's operands too: weights
// [O, 1, 1, C] over channels-last static data, a bias of O values, a residual of the output's
// shape [N, H, W, O]. The CPU backend refuses the form by name (the builder makes it for cuda
// plans only).
TEST(Pooling, SqueezeExcitationChecksItsProjection) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 4, 4, 6});
  auto w1 = net.add_input("w1", DataType::kF32, {3, 1, 1, 6});
  auto w2 = net.add_input("w2", DataType::kF32, {6, 1, 1, 3});
  auto wp = net.add_input("wp", DataType::kF32, {5, 1, 1, 6});
  auto bp = net.add_input("bp", DataType::kF32, {5});
  auto res = net.add_input("res", DataType::kF32, {2, 4, 4, 5});
  auto wp_bad = net.add_input("wp_bad", DataType::kF32, {5, 3, 3, 6});
  auto bp_bad = net.add_input("bp_bad", DataType::kF32, {6});
  auto res_bad = net.add_input("res_bad", DataType::kF32, {2, 4, 4, 6});
  SqueezeExcitationParams p;
  p.channels_last = true;
  p.project = true;
  p.projection.has_bias = p.projection.has_residual = true;
  EXPECT_EQ(net.tensor(net.add("se", p, {x, w1, w2, wp, bp, res})).shape, (Shape{2, 4, 4, 5}));
  const auto expect_error = [&](const SqueezeExcitationParams& q,
                                const std::vector<TensorId>& inputs, const char* what) {
    try {
      net.add("bad_se", q, inputs);
      ADD_FAILURE() << what << ": no error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(e.message().find("bad_se"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("projection"), std::string::npos) << e.message();
    }
  };
  expect_error(p, {x, w1, w2, wp_bad, bp, res}, "3x3 projection weights");
  expect_error(p, {x, w1, w2, wp, bp_bad, res}, "a bias of 6 values");
  expect_error(p, {x, w1, w2, wp, bp, res_bad}, "a residual of 6 channels");
  SqueezeExcitationParams first = p;
  first.channels_last = false;
  expect_error(first, {x, w1, w2, wp, bp, res}, "channels-first data");
  try {
    run_one_layer(
        p, {random_tensor(DataType::kF32, {2, 4, 4, 6}, 1),
            random_tensor(DataType::kF32, {3, 1, 1, 6}, 2),
            random_tensor(DataType::kF32, {6, 1, 1, 3}, 3),
            random_tensor(DataType::kF32, {5, 1, 1, 6}, 4), random_tensor(DataType::kF32, {5}, 5),
            random_tensor(DataType::kF32, {2, 4, 4, 5}, 6)});
    ADD_FAILURE() << "the CPU backend ran the projection form";
  } catch (const Unsupported& e) {
    EXPECT_NE(e.message().find("projection"), std::string::npos) << e.message();
  }
}

// The squeeze-excitation layer in f32 against its definition computed here in double, in both
// layouts, with and without biases, over several samples, at sizes that split every pass over
// threads ([3, 20, 20, 40], 48,000 elements) and that do not (one pixel a sample, 5 channels).
TEST(Pooling, SqueezeExcitationMatchesItsDefinition) {
  struct Case {
    Shape x;  // channels-first
    int64_t squeeze;
    bool channels_last, biases;
    ActivationKind act1, act2;
  };
  using K = ActivationKind;
  const Case cases[] = {{{3, 40, 20, 20}, 10, true, true, K::kRelu, K::kHardSigmoid},
                        {{3, 40, 20, 20}, 10, false, false, K::kSilu, K::kSigmoid},
                        {{2, 24, 30, 30}, 6, false, true, K::kRelu, K::kSigmoid},
                        {{4, 5, 1, 1}, 3, true, false, K::kSilu, K::kHardSigmoid},
                        {{1, 300, 3, 2}, 75, true, true, K::kRelu, K::kSigmoid}};
  for (const Case& k : cases) {
    SCOPED_TRACE(shape_to_string(k.x) + (k.channels_last ? " channels last" : ""));
    SqueezeExcitationParams p;
    p.activation1 = k.act1;
    p.activation2 = k.act2;
    p.has_bias1 = p.has_bias2 = k.biases;
    p.channels_last = k.channels_last;
    const int64_t n = k.x[0], c = k.x[1], plane = k.x[2] * k.x[3], s = k.squeeze;
    const Shape x_shape = k.channels_last ? Shape{n, k.x[2], k.x[3], c} : k.x;
    const Shape w1_shape = k.channels_last ? Shape{s, 1, 1, c} : Shape{s, c, 1, 1};
    const Shape w2_shape = k.channels_last ? Shape{c, 1, 1, s} : Shape{c, s, 1, 1};
    std::vector<HostTensor> in = {random_tensor(DataType::kF32, x_shape, 11, -2, 2),
                                  random_tensor(DataType::kF32, w1_shape, 12),
                                  random_tensor(DataType::kF32, w2_shape, 14)};
    if (k.biases) {
      in.insert(in.begin() + 2, random_tensor(DataType::kF32, {s}, 13));
      in.push_back(random_tensor(DataType::kF32, {c}, 15));
    }
    const auto x = testing::to_doubles(in[0]), w1 = testing::to_doubles(in[1]),
               w2 = testing::to_doubles(in[k.biases ? 3 : 2]);
    const auto b1 = k.biases ? testing::to_doubles(in[2]) : std::vector<double>(s, 0.0);
    const auto b2 = k.biases ? testing::to_doubles(in[4]) : std::vector<double>(c, 0.0);
    const auto index = [&](int64_t i, int64_t ch, int64_t q) {
      return static_cast<size_t>(k.channels_last ? (i * plane + q) * c + ch
                                                 : (i * c + ch) * plane + q);
    };
    std::vector<double> want(x.size());
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> mean(c, 0.0), hidden(s), gate(c);
      for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t q = 0; q < plane; ++q) mean[ch] += x[index(i, ch, q)];
        mean[ch] /= static_cast<double>(plane);
      }
      for (int64_t j = 0; j < s; ++j) {
        double acc = b1[j];
        for (int64_t ch = 0; ch < c; ++ch) acc += w1[j * c + ch] * mean[ch];
        hidden[j] = activate(k.act1, static_cast<float>(acc), 0, 0);
      }
      for (int64_t ch = 0; ch < c; ++ch) {
        double acc = b2[ch];
        for (int64_t j = 0; j < s; ++j) acc += w2[ch * s + j] * hidden[j];
        gate[ch] = activate(k.act2, static_cast<float>(acc), 0, 0);
        for (int64_t q = 0; q < plane; ++q) want[index(i, ch, q)] = x[index(i, ch, q)] * gate[ch];
      }
    }
    const HostTensor got = run_one_layer(p, in)[0];
    EXPECT_EQ(got.shape(), x_shape);
    EXPECT_TRUE(near(got, want, 1e-5, 1e-6));
  }
}

// The squeeze-excitation layer on f16 data: the same values as in f32, within f16's rounding.
TEST(Pooling, SqueezeExcitationInHalfMatchesF32) {
  SqueezeExcitationParams p;
  p.activation1 = ActivationKind::kSilu;
  p.has_bias1 = p.has_bias2 = true;
  p.channels_last = true;
  const Shape x_shape = {2, 5, 4, 6}, w1_shape = {3, 1, 1, 6}, w2_shape = {6, 1, 1, 3};
  std::vector<HostTensor> f32 = {
      random_tensor(DataType::kF32, x_shape, 1), random_tensor(DataType::kF32, w1_shape, 2),
      random_tensor(DataType::kF32, {3}, 3), random_tensor(DataType::kF32, w2_shape, 4),
      random_tensor(DataType::kF32, {6}, 5)};
  std::vector<HostTensor> f16;
  for (const HostTensor& t : f32) {
    f16.push_back(testing::tensor_from(DataType::kF16, t.shape(), testing::to_doubles(t)));
  }
  const auto want = testing::to_doubles(run_one_layer(p, f32)[0]);
  const HostTensor got = run_one_layer(p, f16)[0];
  EXPECT_EQ(got.dtype(), DataType::kF16);
  EXPECT_TRUE(near(got, want, 1e-2, 1e-2));
}

TEST(Pooling, DynamicDimsInferSymbolically) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 3, kDynamic, 9},
                         Profile{{1, 3, 4, 9}, {2, 3, 8, 9}, {4, 3, 16, 9}});
  auto y = net.add("pool", pool(kMax, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {}, true), {x});
  EXPECT_EQ(net.tensor(y).shape, (Shape{kDynamic, 3, kDynamic, 5}));
  auto z = net.add("adaptive", adaptive(kAvg, {2, 2}), {x});
  EXPECT_EQ(net.tensor(z).shape, (Shape{kDynamic, 3, 2, 2}));
}

}  // namespace
}  // namespace kiln::engine
