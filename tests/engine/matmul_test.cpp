// MatMul on the CPU backend against a float64 reference: rank-1 promotion, transposes,
// broadcast batch dims, zero-size dims, post-ops, f16/bf16, and bad input; integer products
// against an exact wrapping reference, alone and through the builder's passes.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/builder.h"
#include "engine/plan.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;
using testing::run_engine;
using testing::run_one_layer;

double act_ref(ActivationKind k, double x, double alpha) {
  switch (k) {
    case ActivationKind::kRelu:
      return x > 0 ? x : 0;
    case ActivationKind::kTanh:
      return std::tanh(x);
    case ActivationKind::kLeakyRelu:
      return x > 0 ? x : alpha * x;
    default:
      return x;
  }
}

// torch.matmul(a.mT if ta, b.mT if tb) + post-ops, as plain loops over values of type V:
// double (activations applied), or uint64_t for integer products, whose sums and products wrap
// around modulo 2^64 as torch's do (i32 results are these modulo 2^32).
template <class V>
std::vector<V> reference_values(const std::vector<V>& x, const Shape& a_shape,
                                const std::vector<V>& y, const Shape& b_shape,
                                const MatMulParams& p, const std::vector<V>* bias,
                                const std::vector<V>* residual, const Shape& res_shape,
                                Shape* shape) {
  const bool av = a_shape.size() == 1, bv = b_shape.size() == 1;
  Shape as = av ? Shape{1, a_shape[0]} : a_shape;
  Shape bs = bv ? Shape{b_shape[0], 1} : b_shape;
  const bool ta = p.transpose_a && !av, tb = p.transpose_b && !bv;
  const size_t rank = std::max(as.size(), bs.size());
  as.insert(as.begin(), rank - as.size(), 1);
  bs.insert(bs.begin(), rank - bs.size(), 1);
  const int64_t m = ta ? as[rank - 1] : as[rank - 2], k = ta ? as[rank - 2] : as[rank - 1];
  const int64_t n = tb ? bs[rank - 2] : bs[rank - 1];
  Shape full(rank);
  for (size_t d = 0; d + 2 < rank; ++d) full[d] = as[d] == 1 ? bs[d] : as[d];
  full[rank - 2] = m;
  full[rank - 1] = n;
  *shape = Shape(full.begin(), full.end() - 2);
  if (!av) shape->push_back(m);
  if (!bv) shape->push_back(n);
  std::vector<V> r(static_cast<size_t>(volume(full)));
  for (int64_t i = 0; i < volume(full); ++i) {
    auto idx = testing::unflatten(full, i);
    const int64_t row = idx[rank - 2], col = idx[rank - 1];
    V s = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      auto ai = idx, bi = idx;
      ai[rank - 2] = ta ? kk : row;
      ai[rank - 1] = ta ? row : kk;
      bi[rank - 2] = tb ? col : kk;
      bi[rank - 1] = tb ? kk : col;
      for (size_t d = 0; d + 2 < rank; ++d) {
        if (as[d] == 1) ai[d] = 0;
        if (bs[d] == 1) bi[d] = 0;
      }
      s += x[static_cast<size_t>(testing::flat_index(as, ai))] *
           y[static_cast<size_t>(testing::flat_index(bs, bi))];
    }
    if (bias) s += (*bias)[static_cast<size_t>(bias->size() == 1 ? 0 : col)];
    if constexpr (std::is_same_v<V, double>) s = act_ref(p.post.activation, s, p.post.alpha);
    r[static_cast<size_t>(i)] = s;
  }
  if (residual) {
    for (int64_t i = 0; i < volume(*shape); ++i) {
      const auto idx = testing::unflatten(*shape, i);
      V& v = r[static_cast<size_t>(i)];
      v += (*residual)[static_cast<size_t>(testing::broadcast_index(res_shape, *shape, idx))];
      if constexpr (std::is_same_v<V, double>) v = act_ref(p.post.activation2, v, 0);
    }
  }
  return r;
}

std::vector<double> reference(const HostTensor& a, const HostTensor& b, const MatMulParams& p,
                              const HostTensor* bias, const HostTensor* residual, Shape* shape) {
  const std::vector<double> bias_v = bias ? testing::to_doubles(*bias) : std::vector<double>{};
  const std::vector<double> res_v =
      residual ? testing::to_doubles(*residual) : std::vector<double>{};
  return reference_values(testing::to_doubles(a), a.shape(), testing::to_doubles(b), b.shape(), p,
                          bias ? &bias_v : nullptr, residual ? &res_v : nullptr,
                          residual ? residual->shape() : Shape{}, shape);
}

struct Case {
  Shape a, b;
  bool ta = false, tb = false;
};

// Sums of up to ~70 products of values in [-2, 2): float32 accumulation error grows with K, so
// absolute error is allowed at 1e-4 (relative 1e-5 still binds for large results).
constexpr double kRtol = 1e-5, kAtol = 1e-4;

// The shapes every dtype's test takes: each transpose, vectors, batches broadcast either way;
// each test adds its own (empty dims, sizes that cross the kernels' blocks).
std::vector<Case> cases_with(std::initializer_list<Case> more) {
  std::vector<Case> cases = {{{3, 4}, {4, 5}},
                             {{4, 3}, {4, 5}, true},
                             {{3, 4}, {5, 4}, false, true},
                             {{4, 3}, {5, 4}, true, true},
                             {{7}, {7}},
                             {{7}, {7, 3}},
                             {{2, 5, 7}, {7}},
                             {{2, 1, 3, 4}, {5, 4, 6}},
                             {{3, 4}, {2, 4, 6}},
                             {{2, 3, 4}, {2, 5, 4}, false, true}};
  cases.insert(cases.end(), more);
  return cases;
}

TEST(MatMul, ShapesTransposesAndBroadcastF32) {
  const std::vector<Case> cases = cases_with({{{1, 1}, {1, 1}},
                                              {{6, 1}, {1, 6}},
                                              {{0, 4}, {4, 5}},
                                              {{3, 0}, {0, 5}},
                                              {{2, 0, 3, 4}, {4, 2}},
                                              {{1, 70}, {70, 33}},
                                              {{65, 70}, {3, 70, 40}},
                                              {{5, 1, 4}, {1, 3}, true}});
  for (const auto& c : cases) {
    MatMulParams p;
    p.transpose_a = c.ta;
    p.transpose_b = c.tb;
    auto a = random_tensor(DataType::kF32, c.a, 1), b = random_tensor(DataType::kF32, c.b, 2);
    Shape shape;
    const auto expected = reference(a, b, p, nullptr, nullptr, &shape);
    auto out = run_one_layer(p, {a, b});
    ASSERT_EQ(out[0].shape(), shape) << shape_to_string(c.a) << " x " << shape_to_string(c.b);
    EXPECT_TRUE(near(out[0], expected, kRtol, kAtol))
        << shape_to_string(c.a) << (c.ta ? "T" : "") << " x " << shape_to_string(c.b)
        << (c.tb ? "T" : "");
  }
}

TEST(MatMul, PostOpsBiasReluResidual) {
  MatMulParams p;
  p.post.has_bias = true;
  p.post.activation = ActivationKind::kRelu;
  p.post.has_residual = true;
  p.post.activation2 = ActivationKind::kTanh;
  auto a = random_tensor(DataType::kF32, {2, 3, 8}, 3),
       b = random_tensor(DataType::kF32, {8, 5}, 4);
  auto bias = random_tensor(DataType::kF32, {5}, 5), res = random_tensor(DataType::kF32, {3, 5}, 6);
  Shape shape;
  const auto expected = reference(a, b, p, &bias, &res, &shape);
  auto out = run_one_layer(p, {a, b, bias, res});
  ASSERT_EQ(out[0].shape(), (Shape{2, 3, 5}));
  EXPECT_TRUE(near(out[0], expected, kRtol, kAtol));

  // Bias only, with leaky relu; and the K == 0 case, where the result is act(bias).
  MatMulParams q;
  q.post.has_bias = true;
  q.post.activation = ActivationKind::kLeakyRelu;
  q.post.alpha = 0.1;
  for (const Shape& ka : {Shape{4, 6}, Shape{4, 0}}) {
    Shape kb = {ka[1], 5};
    auto x = random_tensor(DataType::kF32, ka, 7), w = random_tensor(DataType::kF32, kb, 8);
    const auto e2 = reference(x, w, q, &bias, nullptr, &shape);
    EXPECT_TRUE(near(run_one_layer(q, {x, w, bias})[0], e2, kRtol, kAtol));
  }
}

// The activations oneDNN runs inside the matmul (onednn::eltwise_for, as the convolution's:
// Convolution.FusedActivationsMatchActivate) against the matmul without one activated by
// activate(), with a NaN, infinities and values past the clamps' bounds among the products:
// ReLU and clamp give their lower bound for NaN, the others what activate() gives.
TEST(MatMul, FusedActivationsMatchActivate) {
  using K = ActivationKind;
  const std::vector<testing::FusedActivation> acts = {{K::kRelu, 0, 0, 0, 0},
                                                      {K::kClamp, 0, 6, 0, 0},
                                                      {K::kClamp, -1, 1, -1, 0},
                                                      {K::kHardSwish},
                                                      {K::kGelu},
                                                      {K::kSilu},
                                                      {K::kHardSigmoid}};
  auto a = random_tensor(DataType::kF32, {6, 40}, 21, -3, 3),
       b = random_tensor(DataType::kF32, {40, 24}, 22);
  auto bias = random_tensor(DataType::kF32, {24}, 23);
  a.as<float>()[3] = std::nanf("");
  a.as<float>()[50] = std::numeric_limits<float>::infinity();
  MatMulParams p;
  p.post.has_bias = true;
  testing::expect_fused_activations(p, {a, b, bias}, acts, "matmul");
}

TEST(MatMul, HalfAndBfloat16ComputeInF32) {
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    MatMulParams p;
    p.transpose_b = true;
    p.post.has_bias = true;
    auto a = random_tensor(t, {2, 3, 16}, 9), b = random_tensor(t, {7, 16}, 10);
    auto bias = random_tensor(t, {7}, 11);
    Shape shape;
    const auto expected = reference(a, b, p, &bias, nullptr, &shape);
    auto out = run_one_layer(p, {a, b, bias});
    EXPECT_EQ(out[0].dtype(), t);
    // Inputs are exact in the reference; only the final rounding to t differs.
    EXPECT_TRUE(near(out[0], expected, t == DataType::kF16 ? 2e-3 : 1e-2, 1e-2));
  }
}

Weights as_weights(const HostTensor& t) {
  const auto* bytes = static_cast<const uint8_t*>(t.data());
  return Weights::from_bytes(t.dtype(), t.shape(), std::vector<uint8_t>(bytes, bytes + t.nbytes()));
}

// A constant b (an engine weight) is read through a cache filled once: f16 widened to f32, and
// f32 rows a multiple of 4 KiB long copied into padded rows. Two runs with new activations.
TEST(MatMul, ConstantWeightsThroughTheCacheIncludingPaddedRows) {
  struct ConstCase {
    Shape a, b;
    bool tb;
    DataType t;
  };
  const ConstCase cases[] = {
      {{3, 5}, {5, 1024}, false, DataType::kF32},        // rows of 4 KiB: padded copy
      {{2, 3, 1024}, {6, 1024}, true, DataType::kF32},   // transposed: stored rows of 4 KiB
      {{2, 3, 5}, {2, 5, 2048}, false, DataType::kF32},  // batched, rows of 8 KiB
      {{4, 5}, {5, 7}, false, DataType::kF32},           // read in place
      {{4, 5}, {5, 1024}, false, DataType::kF16},        // widened and padded
      {{3}, {3}, false, DataType::kF16},                 // vector b: widened
  };
  for (const auto& c : cases) {
    MatMulParams p;
    p.transpose_b = c.tb;
    p.post.has_bias = true;
    const auto b = random_tensor(c.t, c.b, 30, -1, 1);
    const int64_t n = c.b.size() == 1 ? 1 : c.tb ? c.b[c.b.size() - 2] : c.b.back();
    const auto bias = random_tensor(c.t, {n}, 31);
    Network net;
    auto a = net.add_input("a", c.t, c.a);
    net.mark_output(net.add(
        "mm", p,
        {a, net.add_constant("b", as_weights(b)), net.add_constant("bias", as_weights(bias))}));
    ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
    const std::string what = shape_to_string(c.a) + " @ " + shape_to_string(c.b) + " " +
                             dtype_name(c.t) + (c.tb ? " (b transposed)" : "");
    for (uint64_t seed : {32, 33}) {
      const auto av = random_tensor(c.t, c.a, seed, -1, 1);
      Shape shape;
      const auto expected = reference(av, b, p, &bias, nullptr, &shape);
      const auto got = ctx.run({av})[0];
      ASSERT_EQ(got.shape(), shape) << what;
      // K up to 1024: float32 sums of that many products get atol 1e-3.
      EXPECT_TRUE(near(got, expected, c.t == DataType::kF32 ? kRtol : 2e-3,
                       c.t == DataType::kF32 ? 1e-3 : 2e-2))
          << what << ", run " << seed;
    }
  }
}

TEST(MatMul, RerunsWithNewShapesRebuildThePrimitive) {
  // One engine with a dynamic batch: the cached primitive must follow the bound shape.
  Network net;
  auto a = net.add_input("a", DataType::kF32, {kDynamic, 4}, Profile{{1, 4}, {3, 4}, {8, 4}});
  auto b = net.add_input("b", DataType::kF32, {4, 2});
  auto y = net.add("mm", MatMulParams{}, {a, b});
  EXPECT_EQ(net.tensor(y).shape, (Shape{kDynamic, 2}));
  net.mark_output(y);
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  for (int64_t rows : {3, 5, 3}) {
    auto x = random_tensor(DataType::kF32, {rows, 4}, 12),
         w = random_tensor(DataType::kF32, {4, 2}, 13);
    Shape shape;
    const auto expected = reference(x, w, MatMulParams{}, nullptr, nullptr, &shape);
    EXPECT_TRUE(near(ctx.run({x, w})[0], expected, kRtol, kAtol)) << rows;
  }
}

// An integer tensor's elements as two's-complement words (i32 sign-extended).
std::vector<uint64_t> to_words(const HostTensor& t) {
  std::vector<uint64_t> w(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = t.dtype() == DataType::kI64 ? static_cast<uint64_t>(t.as<int64_t>()[i])
                                       : static_cast<uint64_t>(int64_t{t.as<int32_t>()[i]});
  }
  return w;
}

// Every element of `got` (i64 or i32) equals the reference's word taken modulo 2^bits.
::testing::AssertionResult equal_words(const HostTensor& got, const std::vector<uint64_t>& want) {
  if (got.numel() != static_cast<int64_t>(want.size())) {
    return ::testing::AssertionFailure() << got.numel() << " elements, expected " << want.size();
  }
  const std::vector<uint64_t> words = to_words(got);
  for (size_t i = 0; i < want.size(); ++i) {
    const uint64_t w = got.dtype() == DataType::kI64
                           ? want[i]
                           : static_cast<uint64_t>(int64_t{static_cast<int32_t>(want[i])});
    if (words[i] != w) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << static_cast<int64_t>(words[i]) << ", expected "
             << static_cast<int64_t>(w);
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<uint64_t> integer_reference(const HostTensor& a, const HostTensor& b,
                                        const MatMulParams& p, const HostTensor* bias,
                                        const HostTensor* residual, Shape* shape) {
  const std::vector<uint64_t> bias_w = bias ? to_words(*bias) : std::vector<uint64_t>{};
  const std::vector<uint64_t> res_w = residual ? to_words(*residual) : std::vector<uint64_t>{};
  return reference_values(to_words(a), a.shape(), to_words(b), b.shape(), p,
                          bias ? &bias_w : nullptr, residual ? &res_w : nullptr,
                          residual ? residual->shape() : Shape{}, shape);
}

// Values spread over the dtype's range: nearly every product and sum wraps around.
HostTensor wide_integers(DataType t, const Shape& shape, uint64_t seed) {
  const double limit = t == DataType::kI64 ? 4e18 : 2e9;
  return random_tensor(t, shape, seed, -limit, limit);
}

// i64 and i32 products in our own loops, exactly torch's: two's-complement wrap-around, every
// shape the float kernel takes (blocks of rows, depth and columns crossed: 37 x 150 x 140).
TEST(MatMul, IntegerProductsWrapAroundExactly) {
  const std::vector<Case> cases = cases_with({{{0, 4}, {4, 5}},
                                              {{3, 0}, {0, 5}},
                                              {{37, 150}, {150, 140}},
                                              {{150, 37}, {140, 150}, true, true},
                                              {{2, 20, 130}, {130, 33}},
                                              {{5, 1, 4}, {1, 3}, true}});
  for (DataType t : {DataType::kI64, DataType::kI32}) {
    for (const auto& c : cases) {
      MatMulParams p;
      p.transpose_a = c.ta;
      p.transpose_b = c.tb;
      const auto a = wide_integers(t, c.a, 1), b = wide_integers(t, c.b, 2);
      Shape shape;
      const auto expected = integer_reference(a, b, p, nullptr, nullptr, &shape);
      const auto out = run_one_layer(p, {a, b});
      const std::string what = std::string(dtype_name(t)) + " " + shape_to_string(c.a) +
                               (c.ta ? "T" : "") + " x " + shape_to_string(c.b) + (c.tb ? "T" : "");
      ASSERT_EQ(out[0].dtype(), t) << what;
      ASSERT_EQ(out[0].shape(), shape) << what;
      EXPECT_TRUE(equal_words(out[0], expected)) << what;
    }
  }
  // By hand: 2^62 * 4 + 3 * 5 = 2^64 + 15 wraps to 15 in i64 (torch's answer); in i32,
  // 2^30 * 4 + 7 * -1 = 2^32 - 7 wraps to -7, and 4 + -2^31 * -1 = 2^31 + 4 to -2^31 + 4.
  const auto wide = run_one_layer(
      MatMulParams{}, {testing::tensor_from(DataType::kI64, {1, 2}, {std::ldexp(1.0, 62), 3}),
                       testing::tensor_from(DataType::kI64, {2}, {4, 5})});
  EXPECT_EQ(wide[0].shape(), (Shape{1}));
  EXPECT_EQ(wide[0].as<int64_t>()[0], 15);
  const auto narrow = run_one_layer(
      MatMulParams{}, {testing::tensor_from(DataType::kI32, {2, 2},
                                            {std::ldexp(1.0, 30), 7, 1, -std::ldexp(1.0, 31)}),
                       testing::tensor_from(DataType::kI32, {2}, {4, -1})});
  EXPECT_EQ(narrow[0].as<int32_t>()[0], -7);
  EXPECT_EQ(narrow[0].as<int32_t>()[1], -2147483644);
}

// Bias over N (or of one element) and a broadcast residual, added with wrap-around; with K == 0
// the result is the bias (plus the residual).
TEST(MatMul, IntegerBiasAndResidualPostOps) {
  for (DataType t : {DataType::kI64, DataType::kI32}) {
    for (int64_t k : {9, 0}) {
      for (int64_t bias_size : {5, 1}) {
        MatMulParams p;
        p.post.has_bias = true;
        p.post.has_residual = true;
        const auto a = wide_integers(t, {2, 3, k}, 3), b = wide_integers(t, {k, 5}, 4);
        const auto bias = wide_integers(t, {bias_size}, 5), res = wide_integers(t, {3, 1}, 6);
        Shape shape;
        const auto expected = integer_reference(a, b, p, &bias, &res, &shape);
        const auto out = run_one_layer(p, {a, b, bias, res});
        ASSERT_EQ(out[0].shape(), (Shape{2, 3, 5}));
        EXPECT_TRUE(equal_words(out[0], expected))
            << dtype_name(t) << " K=" << k << " bias of " << bias_size;
      }
    }
  }
}

// The builder's passes on an integer matmul: the transpose before it becomes its flag, the [N]
// add its bias and the full-shape add its residual (one layer), computing what the unbuilt
// network computes.
TEST(MatMul, IntegerMatMulThroughTheBuilder) {
  Network net;
  auto x = net.add_input("x", DataType::kI64, {2, 3, 4});
  auto w = net.add_input("w", DataType::kI64, {5, 4});
  auto bias = net.add_input("bias", DataType::kI64, {5});
  auto res = net.add_input("res", DataType::kI64, {2, 3, 5});
  ShuffleParams swap;
  swap.first_perm = {1, 0};
  auto y = net.add("mm", MatMulParams{}, {x, net.add("wt", swap, {w})});
  y = net.add("bias_add", ElementwiseParams{BinaryOp::kAdd}, {y, bias});
  net.mark_output(net.add("res_add", ElementwiseParams{BinaryOp::kAdd}, {res, y}), "y");
  BuildReport report;
  Plan plan = build(net, BuilderConfig{}, &report);
  ASSERT_EQ(plan.network.layers().size(), 1u) << report.to_string();
  const auto& p = std::get<MatMulParams>(plan.network.layers()[0].params);
  EXPECT_TRUE(p.transpose_b && p.post.has_bias && p.post.has_residual) << report.to_string();
  const std::vector<HostTensor> in = {
      wide_integers(DataType::kI64, {2, 3, 4}, 7), wide_integers(DataType::kI64, {5, 4}, 8),
      wide_integers(DataType::kI64, {5}, 9), wide_integers(DataType::kI64, {2, 3, 5}, 10)};
  EXPECT_TRUE(equal_words(run_engine(plan.network, in)[0], to_words(run_engine(net, in)[0])));
}

template <class E>
void expect_error(Network& net, const std::vector<TensorId>& in, const MatMulParams& p) {
  try {
    net.add("bad_mm", p, in);
    FAIL() << "no error";
  } catch (const E& e) {
    EXPECT_NE(e.message().find("bad_mm"), std::string::npos) << e.message();
  }
}

TEST(MatMul, InvalidInputsAreRejectedWithTheLayerName) {
  Network net;
  auto a = net.add_input("a", DataType::kF32, {2, 3});
  auto b = net.add_input("b", DataType::kF32, {4, 5});
  auto h = net.add_input("h", DataType::kF16, {3, 5});
  auto i = net.add_input("i", DataType::kI64, {3, 5});
  auto j = net.add_input("j", DataType::kI32, {5, 3});
  auto u = net.add_input("u", DataType::kU8, {3, 5});
  auto s = net.add_input("s", DataType::kF32, {});
  auto bias = net.add_input("bias", DataType::kF32, {4});
  expect_error<ShapeMismatch>(net, {a, b}, {});
  expect_error<InvalidArgument>(net, {a, h}, {});
  expect_error<InvalidArgument>(net, {u, u}, {false, true, {}});  // no u8 products
  expect_error<InvalidArgument>(net, {i, j}, {});                 // i64 x i32: insert a cast
  MatMulParams relu;
  relu.transpose_b = true;
  relu.post.activation = ActivationKind::kRelu;
  expect_error<InvalidArgument>(net, {i, i}, relu);  // integer products take no activation
  expect_error<InvalidArgument>(net, {s, a}, {});
  expect_error<InvalidArgument>(net, {a}, {});
  MatMulParams with_bias;
  with_bias.post.has_bias = true;
  expect_error<InvalidArgument>(net, {a, b}, with_bias);
  auto c = net.add_input("c", DataType::kF32, {3, 5});
  expect_error<ShapeMismatch>(net, {a, c, bias}, with_bias);
  auto batch_a = net.add_input("ba", DataType::kF32, {2, 2, 3});
  auto batch_b = net.add_input("bb", DataType::kF32, {3, 3, 5});
  expect_error<ShapeMismatch>(net, {batch_a, batch_b}, {});
}

}  // namespace
}  // namespace kiln::engine
