// The orthogonal polynomials of the elementwise family (engine/orthogonal_polynomials.h) on the
// CPU backend: against their three-term recurrences in long double on a grid of x and degrees,
// and against torch's own values at the ends of the intervals, for negative, fractional, NaN and
// infinite degrees and past Hermite's limit.
#include <cmath>
#include <limits>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::run_one_layer;
using testing::tensor_from;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

constexpr BinaryOp kPolynomials[] = {
    BinaryOp::kChebyshevT,        BinaryOp::kChebyshevU,        BinaryOp::kChebyshevV,
    BinaryOp::kChebyshevW,        BinaryOp::kShiftedChebyshevT, BinaryOp::kShiftedChebyshevU,
    BinaryOp::kShiftedChebyshevV, BinaryOp::kShiftedChebyshevW, BinaryOp::kHermiteH,
    BinaryOp::kHermiteHe,         BinaryOp::kLaguerreL,         BinaryOp::kLegendreP};

// p_n(x) by the textbook recurrence p_{k+1} = (a_k x + b_k) p_k - c_k p_{k-1} in long double, with
// the largest |p_k| on the way: the float computation's rounding errors scale with it.
struct Reference {
  long double value = 1, largest = 1;
};

Reference reference(BinaryOp op, long double x, int n) {
  const bool shifted = op >= BinaryOp::kShiftedChebyshevT && op <= BinaryOp::kShiftedChebyshevW;
  const long double y = shifted ? 2 * x - 1 : x;
  long double p = 1, q = 0;
  switch (op) {
    case BinaryOp::kChebyshevT:
    case BinaryOp::kShiftedChebyshevT:
    case BinaryOp::kHermiteHe:
    case BinaryOp::kLegendreP:
      q = y;
      break;
    case BinaryOp::kChebyshevU:
    case BinaryOp::kShiftedChebyshevU:
    case BinaryOp::kHermiteH:
      q = 2 * y;
      break;
    case BinaryOp::kChebyshevV:
    case BinaryOp::kShiftedChebyshevV:
      q = 2 * y - 1;
      break;
    case BinaryOp::kChebyshevW:
    case BinaryOp::kShiftedChebyshevW:
      q = 2 * y + 1;
      break;
    case BinaryOp::kLaguerreL:
      q = 1 - x;
      break;
    default:
      ADD_FAILURE() << "not a polynomial: " << binary_op_name(op);
  }
  Reference r;
  if (n == 0) return r;
  r.value = q;
  r.largest = std::max<long double>(1, std::fabs(q));
  for (int k = 1; k < n; ++k) {
    long double next;
    if (op == BinaryOp::kHermiteH) {
      next = 2 * x * q - 2 * k * p;
    } else if (op == BinaryOp::kHermiteHe) {
      next = x * q - k * p;
    } else if (op == BinaryOp::kLaguerreL) {
      next = ((2 * k + 1 - x) * q - k * p) / (k + 1);
    } else if (op == BinaryOp::kLegendreP) {
      next = ((2 * k + 1) * x * q - k * p) / (k + 1);
    } else {
      next = 2 * y * q - p;
    }
    p = q;
    q = next;
    r.largest = std::max(r.largest, std::fabs(q));
  }
  r.value = q;
  return r;
}

// Every x from -3 to 3 by eighths (the ends of [-1, 1] and [0, 1] among them) and points near
// those ends, with degrees through both the recurrences and torch's trig forms (from 5, 7 or 9).
TEST(ElementwisePolynomials, MatchTheirRecurrences) {
  std::vector<double> xs;
  for (int i = -24; i <= 24; ++i) xs.push_back(i / 8.0);
  for (double x : {-0.999, -0.01, 0.001, 0.3, 0.999, 1.001}) xs.push_back(x);
  const int degrees[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 25, 40};
  for (BinaryOp op : kPolynomials) {
    std::vector<double> x, n, want;
    std::vector<double> tolerance;
    for (double u : xs) {
      for (int d : degrees) {
        const Reference r = reference(op, static_cast<float>(u), d);  // at the float input
        if (r.largest > 1e37) continue;  // past float's range on the way
        x.push_back(u);
        n.push_back(d);
        want.push_back(static_cast<double>(r.value));
        // A few float roundings per step, each of the largest term's size, along d + 1 steps
        // (or of the trig forms' argument, d times the angle).
        tolerance.push_back(16 * (d + 1) * (d + 1) * 0x1p-24 * static_cast<double>(r.largest));
      }
    }
    const int64_t size = static_cast<int64_t>(x.size());
    const auto out = run_one_layer(ElementwiseParams{op}, {tensor_from(DataType::kF32, {size}, x),
                                                           tensor_from(DataType::kF32, {size}, n)});
    const auto got = testing::to_doubles(out[0]);
    for (int64_t i = 0; i < size; ++i) {
      EXPECT_LE(std::fabs(got[i] - want[i]), tolerance[i])
          << binary_op_name(op) << "(" << x[i] << ", " << n[i] << ") = " << got[i] << ", want "
          << want[i];
    }
  }
}

// torch's values (float32, CPU) at pairs of x and n that take each branch of its kernels: the
// ends of the intervals (x = ±1, and 0 and 1 for the shifted kinds), degrees that are negative
// (0), fractional (truncated), NaN or infinite (0: torch's CPU kernels convert them to a
// negative int64), a trig form, Hermite past degree 128 (NaN), NaN and infinite x.
const std::vector<double> kEdgeX = {1.0, 1.0,  -1.0, -1.0, -1.0, 0.0,  0.0,  0.0,
                                    0.5, 0.5,  0.5,  0.5,  0.5,  0.5,  0.5,  0.5,
                                    0.3, 0.75, -0.5, 2.0,  kNan, kInf, -kInf};
const std::vector<double> kEdgeN = {5.0,  12.0, 5.0, 12.0,  13.0, 4.0,  5.0,   12.0,
                                    -2.0, -0.5, 0.9, 3.7,   kNan, kInf, -kInf, 1e30,
                                    9.9,  20.0, 7.0, 129.0, 0.0,  2.0,  3.0};

struct EdgeCase {
  BinaryOp op;
  std::vector<double> want;
};

// clang-format off
const EdgeCase kEdgeCases[] = {
    {BinaryOp::kChebyshevT,
     {1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0,
      0.3888273537158966, -0.3122098445892334, -0.5000007748603821, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kChebyshevU,
     {6.0, 13.0, -6.0, 13.0, -14.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0,
      0.0990886464715004, 0.7650035619735718, -1.0, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kChebyshevV,
     {1.0, 1.0, -11.0, 25.0, -27.0, 1.0, -1.0, 0.9999996423721313, 0.0, 1.0, 1.0, -1.0, 0.0, 0.0,
      0.0, 0.0, 1.0648845434188843, -0.6712812185287476, -2.0, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kChebyshevW,
     {11.0, 25.0, -1.0, 1.0, -1.0, 1.0, 1.0, 1.0000004768371582, 0.0, 1.0, 1.0, -1.0, 0.0, 0.0, 0.0,
      0.0, -0.8667073249816895, 2.2012884616851807, 0.0, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kShiftedChebyshevT,
     {1.0, 1.0, -3363.0, 768398400.0, -4478554112.0, 1.0, -1.0, 1.0, 0.0, 1.0, 1.0, -0.0, 0.0, 0.0,
      0.0, 0.0, 0.5329294204711914, -0.49999967217445374, -5042.0, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kShiftedChebyshevU,
     {6.0, 13.0, -6930.0, 1583408000.0, -9228778496.0, 5.0, -6.0, 13.0, 0.0, 1.0, 1.0, -0.0, 0.0,
      0.0, 0.0, 0.0, 0.9022237062454224, -1.5325359754569945e-06, -10864.0, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kShiftedChebyshevV,
     {1.0, 1.0, -8119.0, 1855077760.0, -10812185600.0, 9.0, -11.0, 25.0, 0.0, 1.0, 1.0, 1.0, 0.0,
      0.0, 0.0, 0.0, 1.825459599494934, -1.000000238418579, -13775.0, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kShiftedChebyshevW,
     {11.0, 25.0, -5741.0, 1311738112.0, -7645369856.0, 1.0, -1.0, 1.0, 0.0, 1.0, 1.0, -1.0, 0.0,
      0.0, 0.0, 0.0, -0.021013297140598297, 0.9999991655349731, -7953.0, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kHermiteH,
     {-8.0, 280768.0, 8.0, 280768.0, 4978816.0, 12.0, 0.0, 665280.0, 0.0, 1.0, 1.0, -5.0, 0.0, 0.0,
      0.0, 0.0, 7010.2880859375, 70937837568.0, 461.0, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kHermiteHe,
     {6.0, -12440.0, -6.0, -12440.0, 23672.0, 3.0, 0.0, 10395.0, 0.0, 1.0, 1.0, -1.375, 0.0, 0.0,
      0.0, 0.0, 250.3907012939453, -731267712.0, 40.0234375, kNan, 1.0, kInf, kNan}},
    {BinaryOp::kLaguerreL,
     {-0.46666663885116577, 0.4962121546268463, 12.883333206176758, 111.34500885009766,
      143.94105529785156, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, -0.1458333283662796, 0.0, 0.0, 0.0, 0.0,
      -0.4179430603981018, 0.3047863841056824, 7.950932502746582, 0.3823481500148773, 1.0, kInf,
      kNan}},
    {BinaryOp::kLegendreP,
     {1.0, 1.0, -1.0, 1.0, -1.0, 0.375, 0.0, 0.2255859375, 0.0, 1.0, 1.0, -0.4375, 0.0, 0.0, 0.0,
      0.0, 0.06370033323764801, 0.024512140080332756, -0.22314453125, kNan, 1.0, kInf, kNan}},
};
// clang-format on

TEST(ElementwisePolynomials, MatchTorchAtTheEdges) {
  const int64_t size = static_cast<int64_t>(kEdgeX.size());
  for (const EdgeCase& c : kEdgeCases) {
    ASSERT_EQ(c.want.size(), kEdgeX.size()) << binary_op_name(c.op);
    const auto out = run_one_layer(
        ElementwiseParams{c.op},
        {tensor_from(DataType::kF32, {size}, kEdgeX), tensor_from(DataType::kF32, {size}, kEdgeN)});
    EXPECT_TRUE(near(out[0], c.want, 1e-6, 0)) << binary_op_name(c.op);
  }
}

// Laguerre's and Legendre's recurrences run all n steps (torch has no trig form for them): degree
// 1000 inside their intervals against the long double recurrence.
TEST(ElementwisePolynomials, HighDegreesRunTheirRecurrences) {
  const std::vector<double> x = {0.0, 0.5, 0.015625}, n = {1000, 1000, 1000};
  for (BinaryOp op : {BinaryOp::kLegendreP, BinaryOp::kLaguerreL}) {
    std::vector<double> want;
    for (double u : x) want.push_back(static_cast<double>(reference(op, u, 1000).value));
    const auto out = run_one_layer(ElementwiseParams{op}, {tensor_from(DataType::kF32, {3}, x),
                                                           tensor_from(DataType::kF32, {3}, n)});
    EXPECT_TRUE(near(out[0], want, 0, 1e-4)) << binary_op_name(op);
  }
}

TEST(ElementwisePolynomials, IntegerOperandsAreRejected) {
  Network net;
  auto i = net.add_input("i", DataType::kI64, {3});
  try {
    net.add("int_hermite", ElementwiseParams{BinaryOp::kHermiteH}, {i, i});
    FAIL() << "accepted integer operands";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(e.message().find("int_hermite"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("hermite_h"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace kiln::engine
