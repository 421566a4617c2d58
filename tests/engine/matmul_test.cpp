// MatMul on the CPU backend against a float64 reference: rank-1 promotion, transposes,
// broadcast batch dims, zero-size dims, post-ops, f16/bf16, and bad input.
#include <cmath>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;
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

// torch.matmul(a.mT if ta, b.mT if tb) + post-ops, as plain loops in float64.
std::vector<double> reference(const HostTensor& a, const HostTensor& b, const MatMulParams& p,
                              const HostTensor* bias, const HostTensor* residual, Shape* shape) {
  const auto x = testing::to_doubles(a), y = testing::to_doubles(b);
  const bool av = a.shape().size() == 1, bv = b.shape().size() == 1;
  Shape as = av ? Shape{1, a.shape()[0]} : a.shape();
  Shape bs = bv ? Shape{b.shape()[0], 1} : b.shape();
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
  const std::vector<double> bias_v = bias ? testing::to_doubles(*bias) : std::vector<double>{};
  const std::vector<double> res_v =
      residual ? testing::to_doubles(*residual) : std::vector<double>{};
  std::vector<double> r(static_cast<size_t>(volume(full)));
  for (int64_t i = 0; i < volume(full); ++i) {
    auto idx = testing::unflatten(full, i);
    const int64_t row = idx[rank - 2], col = idx[rank - 1];
    double s = 0;
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
    if (bias) s += bias_v[static_cast<size_t>(bias->numel() == 1 ? 0 : col)];
    s = act_ref(p.post.activation, s, p.post.alpha);
    r[static_cast<size_t>(i)] = s;
  }
  if (residual) {
    for (int64_t i = 0; i < volume(*shape); ++i) {
      const auto idx = testing::unflatten(*shape, i);
      r[static_cast<size_t>(i)] +=
          res_v[static_cast<size_t>(testing::broadcast_index(residual->shape(), *shape, idx))];
      r[static_cast<size_t>(i)] = act_ref(p.post.activation2, r[static_cast<size_t>(i)], 0);
    }
  }
  return r;
}

struct Case {
  Shape a, b;
  bool ta = false, tb = false;
};

// Sums of up to ~70 products of values in [-2, 2): float32 accumulation error grows with K, so
// absolute error is allowed at 1e-4 (relative 1e-5 still binds for large results).
constexpr double kRtol = 1e-5, kAtol = 1e-4;

TEST(MatMul, ShapesTransposesAndBroadcastF32) {
  const Case cases[] = {{{3, 4}, {4, 5}},
                        {{4, 3}, {4, 5}, true},
                        {{3, 4}, {5, 4}, false, true},
                        {{4, 3}, {5, 4}, true, true},
                        {{7}, {7}},
                        {{7}, {7, 3}},
                        {{2, 5, 7}, {7}},
                        {{2, 1, 3, 4}, {5, 4, 6}},
                        {{3, 4}, {2, 4, 6}},
                        {{2, 3, 4}, {2, 5, 4}, false, true},
                        {{1, 1}, {1, 1}},
                        {{6, 1}, {1, 6}},
                        {{0, 4}, {4, 5}},
                        {{3, 0}, {0, 5}},
                        {{2, 0, 3, 4}, {4, 2}},
                        {{1, 70}, {70, 33}},
                        {{65, 70}, {3, 70, 40}},
                        {{5, 1, 4}, {1, 3}, true}};
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
  auto s = net.add_input("s", DataType::kF32, {});
  auto bias = net.add_input("bias", DataType::kF32, {4});
  expect_error<ShapeMismatch>(net, {a, b}, {});
  expect_error<InvalidArgument>(net, {a, h}, {});
  expect_error<InvalidArgument>(net, {i, i}, {false, true, {}});
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
