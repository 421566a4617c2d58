// Elementwise family on the CPU backend against float64 references: broadcasting, dtypes,
// zero-size dims, integer semantics, bad input.
#include <cmath>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;
using testing::run_one_layer;

std::vector<double> reference_binary(BinaryOp op, const HostTensor& a, const HostTensor& b,
                                     const Shape& out) {
  const auto x = testing::to_doubles(a), y = testing::to_doubles(b);
  std::vector<double> r(static_cast<size_t>(volume(out)));
  for (int64_t i = 0; i < volume(out); ++i) {
    const auto idx = testing::unflatten(out, i);
    const double u = x[static_cast<size_t>(testing::broadcast_index(a.shape(), out, idx))];
    const double v = y[static_cast<size_t>(testing::broadcast_index(b.shape(), out, idx))];
    double z = 0;
    switch (op) {
      case BinaryOp::kAdd:
        z = u + v;
        break;
      case BinaryOp::kSub:
        z = u - v;
        break;
      case BinaryOp::kMul:
        z = u * v;
        break;
      case BinaryOp::kDiv:
        z = u / v;
        break;
      case BinaryOp::kMax:
        z = std::max(u, v);
        break;
      case BinaryOp::kMin:
        z = std::min(u, v);
        break;
      case BinaryOp::kFloorDiv:
        z = std::floor(u / v);
        break;
      case BinaryOp::kMod:
        z = u - std::floor(u / v) * v;
        break;
      case BinaryOp::kPow:
        z = std::pow(u, v);
        break;
      case BinaryOp::kLt:
        z = u < v;
        break;
      case BinaryOp::kEq:
        z = u == v;
        break;
      default:
        ADD_FAILURE() << "no reference for op";
        break;
    }
    r[static_cast<size_t>(i)] = z;
  }
  return r;
}

struct BinaryCase {
  Shape a, b, out;
};

TEST(Elementwise, BroadcastingF32) {
  const BinaryCase cases[] = {{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
                              {{2, 3, 4}, {4}, {2, 3, 4}},
                              {{2, 1, 4}, {3, 1}, {2, 3, 4}},
                              {{1}, {5, 2}, {5, 2}},
                              {{0, 3}, {3}, {0, 3}},
                              {{}, {2, 2}, {2, 2}},
                              {{64, 70, 30}, {70, 1}, {64, 70, 30}}};
  for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv,
                      BinaryOp::kMax, BinaryOp::kMin, BinaryOp::kLt}) {
    for (const auto& c : cases) {
      auto a = random_tensor(DataType::kF32, c.a, 1), b = random_tensor(DataType::kF32, c.b, 2);
      auto out = run_one_layer(ElementwiseParams{op}, {a, b});
      ASSERT_EQ(out[0].shape(), c.out);
      EXPECT_EQ(out[0].dtype(), op == BinaryOp::kLt ? DataType::kBool : DataType::kF32);
      EXPECT_TRUE(near(out[0], reference_binary(op, a, b, c.out)))
          << binary_op_name(op) << " " << shape_to_string(c.a) << " " << shape_to_string(c.b);
    }
  }
}

TEST(Elementwise, IntegerSemanticsAreExactAndPythonLike) {
  auto a = testing::tensor_from(DataType::kI64, {6}, {7, -7, 7, -7, 5000000000, 0});
  auto b = testing::tensor_from(DataType::kI64, {6}, {2, 2, -2, -2, 3, 5});
  EXPECT_TRUE(near(run_one_layer(ElementwiseParams{BinaryOp::kFloorDiv}, {a, b})[0],
                   {3, -4, -4, 3, 1666666666, 0}, 0, 0));
  EXPECT_TRUE(near(run_one_layer(ElementwiseParams{BinaryOp::kMod}, {a, b})[0],
                   {1, 1, -1, -1, 2, 0}, 0, 0));
  EXPECT_TRUE(near(run_one_layer(ElementwiseParams{BinaryOp::kMul}, {a, b})[0],
                   {14, -14, -14, 14, 15000000000, 0}, 0, 0));
  // Negative exponents as PyTorch's integer tensors take them: 1 / a^-b, truncated.
  auto base = testing::tensor_from(DataType::kI64, {6}, {6, 1, -1, -1, 0, 2});
  auto exponent = testing::tensor_from(DataType::kI64, {6}, {-8, -3, -3, -2, -1, 10});
  EXPECT_TRUE(near(run_one_layer(ElementwiseParams{BinaryOp::kPow}, {base, exponent})[0],
                   {0, 1, -1, 1, 0, 1024}, 0, 0));
  auto zero = testing::tensor_from(DataType::kI64, {6}, {1, 1, 1, 0, 1, 1});
  try {
    run_one_layer(ElementwiseParams{BinaryOp::kFloorDiv}, {a, zero});
    FAIL() << "division by zero did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(e.message().find("integer division by zero"), std::string::npos);
  }
}

TEST(Elementwise, HalfAndBfloat16) {
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    auto a = random_tensor(t, {3, 5}, 3), b = random_tensor(t, {5}, 4);
    auto out = run_one_layer(ElementwiseParams{BinaryOp::kMul}, {a, b});
    EXPECT_EQ(out[0].dtype(), t);
    EXPECT_TRUE(near(out[0], reference_binary(BinaryOp::kMul, a, b, {3, 5}),
                     t == DataType::kF16 ? 1e-3 : 8e-3, 1e-3));
  }
}

TEST(Elementwise, UnaryAndActivation) {
  auto x = random_tensor(DataType::kF32, {4, 33}, 5, -3, 3);
  const auto xs = testing::to_doubles(x);
  auto map = [&](double (*f)(double)) {
    std::vector<double> r;
    for (double v : xs) r.push_back(f(v));
    return r;
  };
  EXPECT_TRUE(near(run_one_layer(UnaryParams{UnaryOp::kExp}, {x})[0],
                   map([](double v) { return std::exp(v); })));
  EXPECT_TRUE(near(run_one_layer(UnaryParams{UnaryOp::kErf}, {x})[0],
                   map([](double v) { return std::erf(v); })));
  EXPECT_TRUE(near(run_one_layer(UnaryParams{UnaryOp::kRound}, {x})[0],
                   map([](double v) { return std::nearbyint(v); })));
  EXPECT_TRUE(near(run_one_layer(ActivationParams{ActivationKind::kRelu}, {x})[0],
                   map([](double v) { return v > 0 ? v : 0.0; })));
  EXPECT_TRUE(near(run_one_layer(ActivationParams{ActivationKind::kGelu}, {x})[0],
                   map([](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); })));
  EXPECT_TRUE(near(run_one_layer(ActivationParams{ActivationKind::kSilu}, {x})[0],
                   map([](double v) { return v / (1 + std::exp(-v)); })));
  EXPECT_TRUE(near(run_one_layer(ActivationParams{ActivationKind::kHardSwish}, {x})[0],
                   map([](double v) { return v * std::min(std::max(v + 3, 0.0), 6.0) / 6; })));
  EXPECT_TRUE(near(run_one_layer(ActivationParams{ActivationKind::kClamp, -1, 0.5}, {x})[0],
                   map([](double v) { return std::min(std::max(v, -1.0), 0.5); })));
  auto i = testing::tensor_from(DataType::kI32, {3}, {-4, 0, 9});
  EXPECT_TRUE(near(run_one_layer(UnaryParams{UnaryOp::kAbs}, {i})[0], {4, 0, 9}, 0, 0));
}

TEST(Elementwise, TanhKeepsItsRelativeAccuracyEverywhere) {
  // Both sides of the polynomial's 0.625 boundary, values near 0 (relative accuracy), the
  // saturated range, infinities and NaN; 37 values so both vector widths have a tail.
  std::vector<double> xs = {0,     1e-30,   -1e-7, 1e-4, -0.01,    0.3,       -0.6249, 0.6249,
                            0.625, -0.6251, 0.9,   -1.7, 3,        -8.5,      9.1,     15,
                            -40,   88,      -89,   200,  INFINITY, -INFINITY, NAN};
  for (int i = 0; xs.size() < 37; ++i) xs.push_back(-5 + 0.37 * i);
  const auto x = testing::tensor_from(DataType::kF32, {static_cast<int64_t>(xs.size())}, xs);
  std::vector<double> want;
  for (double v : testing::to_doubles(x)) want.push_back(std::tanh(v));
  EXPECT_TRUE(near(run_one_layer(ActivationParams{ActivationKind::kTanh}, {x})[0], want, 3e-7, 0));
}

// x ** c for a scalar c: torch's CPU kernels compute the small exponents as products, square
// roots and reciprocals, and so does kiln (its block kernel spots the uniform exponent); other
// exponents, and exponents that vary, go through pow. All against float64 pow.
TEST(Elementwise, PowByScalarAndByTensor) {
  auto x = random_tensor(DataType::kF32, {3, 700}, 60, 0.1, 4);
  for (float e : {2.f, 3.f, 0.5f, -1.f, -2.f, 2.5f, -0.75f}) {
    HostTensor c(DataType::kF32, {});
    c.as<float>()[0] = e;
    std::vector<double> want;
    for (double v : testing::to_doubles(x)) want.push_back(std::pow(v, static_cast<double>(e)));
    EXPECT_TRUE(near(run_one_layer(ElementwiseParams{BinaryOp::kPow}, {x, c})[0], want, 1e-6, 0))
        << e;
  }
  auto y = random_tensor(DataType::kF32, {3, 700}, 61, -2, 3);
  y.as<float>()[5] = 2.f;  // one block starts with 2, then varies
  EXPECT_TRUE(near(run_one_layer(ElementwiseParams{BinaryOp::kPow}, {x, y})[0],
                   reference_binary(BinaryOp::kPow, x, y, {3, 700}), 1e-6, 0));
}

TEST(Elementwise, SelectAndCast) {
  auto c = testing::tensor_from(DataType::kBool, {2, 1}, {1, 0});
  auto a = random_tensor(DataType::kF32, {2, 3}, 6), b = random_tensor(DataType::kF32, {3}, 7);
  auto out = run_one_layer(SelectParams{}, {c, a, b})[0];
  const auto av = testing::to_doubles(a), bv = testing::to_doubles(b);
  EXPECT_TRUE(near(out, {av[0], av[1], av[2], bv[0], bv[1], bv[2]}, 0, 0));

  auto f = testing::tensor_from(DataType::kF32, {4}, {1.7, -1.7, 2.5, 65504});
  EXPECT_TRUE(near(run_one_layer(CastParams{DataType::kI64}, {f})[0], {1, -1, 2, 65504}, 0, 0));
  EXPECT_TRUE(near(run_one_layer(CastParams{DataType::kBool}, {f})[0], {1, 1, 1, 1}, 0, 0));
  auto big = testing::tensor_from(DataType::kI64, {1}, {9007199254740993.0});
  EXPECT_EQ(run_one_layer(CastParams{DataType::kI64}, {big})[0].as<int64_t>()[0],
            big.as<int64_t>()[0]);
}

TEST(Elementwise, FusedProgramMatchesLayerByLayer) {
  // y = relu(a * b + c) computed as one fused layer.
  auto a = random_tensor(DataType::kF32, {3, 7}, 8), b = random_tensor(DataType::kF32, {7}, 9),
       c = random_tensor(DataType::kF32, {3, 1}, 10);
  FusedElementwiseParams p;
  p.program = {0, static_cast<int64_t>(BinaryOp::kMul),        0, 1,  //
               0, static_cast<int64_t>(BinaryOp::kAdd),        3, 2,  //
               2, static_cast<int64_t>(ActivationKind::kRelu), 4, 0};
  p.constants = {0, 0, 0, 0, 0, 0};
  auto fused = run_one_layer(p, {a, b, c})[0];
  auto unfused = testing::run_network({a, b, c}, [](Network& n, const std::vector<TensorId>& in) {
    auto m = n.add("mul", ElementwiseParams{BinaryOp::kMul}, {in[0], in[1]});
    auto s = n.add("add", ElementwiseParams{BinaryOp::kAdd}, {m, in[2]});
    return std::vector<TensorId>{n.add("relu", ActivationParams{ActivationKind::kRelu}, {s})};
  })[0];
  EXPECT_TRUE(near(fused, testing::to_doubles(unfused), 0, 0));
}

TEST(Elementwise, InvalidLayersAreRejectedWithTheirName) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3});
  auto y = net.add_input("y", DataType::kF32, {4});
  auto i = net.add_input("i", DataType::kI64, {3});
  try {
    net.add("bad_add", ElementwiseParams{BinaryOp::kAdd}, {x, y});
    FAIL();
  } catch (const ShapeMismatch& e) {
    EXPECT_NE(e.message().find("bad_add"), std::string::npos) << e.message();
  }
  EXPECT_THROW(net.add("mixed", ElementwiseParams{BinaryOp::kAdd}, {x, i}), InvalidArgument);
  EXPECT_THROW(net.add("intdiv", ElementwiseParams{BinaryOp::kDiv}, {i, i}), InvalidArgument);
  EXPECT_THROW(net.add("one_input", ElementwiseParams{BinaryOp::kAdd}, {x}), InvalidArgument);
  EXPECT_THROW(net.add("relu_int", ActivationParams{ActivationKind::kRelu}, {i}), InvalidArgument);
  EXPECT_THROW(net.add("no_tensor", UnaryParams{UnaryOp::kExp}, {42}), InvalidArgument);
}

}  // namespace
}  // namespace kiln::engine
