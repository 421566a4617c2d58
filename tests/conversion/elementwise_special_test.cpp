// The special-function converters (lgamma, digamma, polygamma, mvlgamma, erfinv, the Bessel and
// Airy functions, zeta, igamma, the orthogonal polynomials, ...) against libtorch on grids with
// zeros, negatives, poles, large values, NaN and infinities, elementwise: their values span many
// magnitudes in one tensor.
#include <cmath>
#include <limits>

#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using testing::run_converted;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// |a - b| <= rtol |b| + atol at every element; NaN and ±inf exactly where torch has them.
::testing::AssertionResult matches_torch_pointwise(const std::string& ir,
                                                   const std::vector<at::Tensor>& inputs,
                                                   double rtol = 1e-5, double atol = 1e-6) {
  auto graph = kiln::testing::parse(ir);
  std::vector<torch::jit::IValue> args(inputs.begin(), inputs.end());
  const at::Tensor expected = kiln::testing::run_graph(*graph, args)[0].toTensor();
  at::Tensor actual;
  try {
    actual = run_converted(ir, inputs)[0];
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "conversion failed: " << e.what();
  }
  if (actual.scalar_type() != expected.scalar_type() || actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << "got " << actual.scalar_type() << actual.sizes() << ", torch gives "
           << expected.scalar_type() << expected.sizes();
  }
  const at::Tensor a = actual.to(at::kDouble).flatten(), b = expected.to(at::kDouble).flatten();
  const at::Tensor in = inputs[0].to(at::kDouble).flatten();
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a[i].item<double>(), y = b[i].item<double>();
    const bool same_special = (std::isnan(x) && std::isnan(y)) || (std::isinf(y) && x == y);
    if (same_special ||
        (std::isfinite(x) && std::isfinite(y) && std::fabs(x - y) <= rtol * std::fabs(y) + atol)) {
      continue;
    }
    return ::testing::AssertionFailure()
           << "element " << i << " (first input " << in[i % in.numel()].item<double>() << "): got "
           << x << ", torch gives " << y;
  }
  return ::testing::AssertionSuccess();
}

std::string unary_ir(const std::string& op) {
  return "graph(%x : Tensor):\n  %y : Tensor = " + op + "(%x)\n  return (%y)\n";
}

at::Tensor floats(const std::vector<double>& v) {
  return torch::tensor(v, torch::kDouble).to(torch::kFloat);
}

// Every eighth from -10 to 10 (the integers among them), and the edges.
at::Tensor real_line() {
  return torch::cat(
      {torch::linspace(-10, 10, 161),
       floats({-kInf, -1e30, -100, -1e-30, -0.0, 0, 1e-30, 30, 100, 1e4, 1e30, kInf, kNan})});
}

TEST(ConvertElementwiseSpecial, UnaryFunctionsOnTheRealLine) {
  const at::Tensor x = real_line();
  for (const char* op :
       {"aten::digamma", "aten::special_gammaln", "aten::special_psi", "aten::special_erfcx",
        "aten::special_ndtr", "aten::special_log_ndtr", "aten::i0", "aten::special_i0e",
        "aten::special_i1", "aten::special_i1e", "aten::special_modified_bessel_i0",
        "aten::special_modified_bessel_i1", "aten::special_modified_bessel_k0",
        "aten::special_modified_bessel_k1", "aten::special_scaled_modified_bessel_k0",
        "aten::special_scaled_modified_bessel_k1", "aten::special_spherical_bessel_j0"}) {
    EXPECT_TRUE(matches_torch_pointwise(unary_ir(op), {x})) << op;
  }
}

// Far out, torch's float kernels lose digits of the oscillating functions (its J_1(1e4) is off in
// the fourth digit): these run on [-30, 30] with the edges.
TEST(ConvertElementwiseSpecial, OscillatingFunctions) {
  const at::Tensor x =
      torch::cat({torch::linspace(-30, 30, 241), floats({-kInf, -0.0, 0, 1e-30, kInf, kNan})});
  for (const char* op : {"aten::special_bessel_j0", "aten::special_bessel_j1",
                         "aten::special_bessel_y0", "aten::special_bessel_y1"}) {
    EXPECT_TRUE(matches_torch_pointwise(unary_ir(op), {x})) << op;
  }
  // Ai decays above 0 and oscillates below, where torch's float series is off by up to 3e-6
  // (at -2.125: 0.1469244, Ai = 0.1469219).
  const at::Tensor a =
      torch::cat({torch::linspace(-10, 10, 161), floats({-kInf, 100, 120, kInf, kNan})});
  EXPECT_TRUE(matches_torch_pointwise(unary_ir("aten::special_airy_ai"), {a}, 1e-5, 5e-6));
}

TEST(ConvertElementwiseSpecial, InverseFunctionsOnTheirDomains) {
  const at::Tensor y = torch::cat(
      {torch::linspace(-1, 1, 81),
       floats({-1.5, -0.999999, -1e-30, -0.0, 1e-30, 0.999999, 1.5, -kInf, kInf, kNan})});
  EXPECT_TRUE(matches_torch_pointwise(unary_ir("aten::erfinv"), {y}));
  EXPECT_TRUE(matches_torch_pointwise(unary_ir("aten::special_erfinv"), {y}));
  const at::Tensor p = torch::cat(
      {torch::linspace(0, 1, 81), floats({-0.5, 1e-38, 1e-30, 1e-10, 0.9999999, 1.5, kNan})});
  EXPECT_TRUE(matches_torch_pointwise(unary_ir("aten::special_ndtri"), {p}));
}

TEST(ConvertElementwiseSpecial, PolygammaOfEachOrder) {
  // Off the poles: at the negative integers torch's trigamma is finite (it rounds sin(πx) in
  // float), where ψ^(1) has a pole. Near them its float reflection loses digits (259.2132 at
  // -8.9375, where ψ^(1) = 259.2095), hence 2e-5.
  const at::Tensor x =
      torch::cat({torch::linspace(-10, 10, 161) + 0.0625, floats({0, 1e-3, 100, 1e4, kInf, kNan})});
  for (int n = 0; n <= 4; ++n) {
    for (const char* op : {"aten::polygamma", "aten::special_polygamma"}) {
      const std::string ir =
          "graph(%x : Tensor):\n  %n : int = prim::Constant[value=" + std::to_string(n) +
          "]()\n  %y : Tensor = " + op + "(%n, %x)\n  return (%y)\n";
      EXPECT_TRUE(matches_torch_pointwise(ir, {x}, 2e-5)) << op << " n = " << n;
    }
  }
}

TEST(ConvertElementwiseSpecial, MultivariateLogGamma) {
  for (int p : {1, 3, 5}) {
    // torch requires x > (p - 1) / 2.
    const at::Tensor x = torch::cat({torch::linspace(0.5 * (p - 1) + 0.01, 20, 100),
                                     floats({0.5 * (p - 1) + 1e-3, 1e4, kInf, kNan})});
    for (const char* op : {"aten::mvlgamma", "aten::special_multigammaln"}) {
      const std::string ir =
          "graph(%x : Tensor):\n  %p : int = prim::Constant[value=" + std::to_string(p) +
          "]()\n  %y : Tensor = " + op + "(%x, %p)\n  return (%y)\n";
      EXPECT_TRUE(matches_torch_pointwise(ir, {x})) << op << " p = " << p;
    }
  }
}

TEST(ConvertElementwiseSpecial, ZetaAndIncompleteGamma) {
  // Every pair of a few first and second arguments, poles and edges included.
  const std::vector<double> firsts = {-1, 0, 0.5, 1, 1.5, 2, 3, 4.5, 12, 100, -kInf, kInf, kNan};
  const std::vector<double> seconds = {-3, -2.5, -0.5, 0,   1e-3,  0.5,  1,
                                       2,  7.5,  30,   1e3, -kInf, kInf, kNan};
  std::vector<double> a, b;
  for (double u : firsts) {
    for (double v : seconds) {
      a.push_back(u);
      b.push_back(v);
    }
  }
  const auto ta = floats(a), tb = floats(b);
  const std::string two = "graph(%a : Tensor, %b : Tensor):\n  %y : Tensor = ";
  for (const char* op : {"aten::special_zeta", "aten::igamma", "aten::igammac",
                         "aten::special_gammainc", "aten::special_gammaincc"}) {
    EXPECT_TRUE(matches_torch_pointwise(two + op + "(%a, %b)\n  return (%y)\n", {ta, tb})) << op;
  }
  // The scalar overloads of zeta, and integer tensors, which torch computes in float.
  EXPECT_TRUE(matches_torch_pointwise(R"IR(
graph(%q : Tensor):
  %s : float = prim::Constant[value=2.5]()
  %y : Tensor = aten::special_zeta(%s, %q)
  %z : Tensor = aten::special_zeta(%y, %s)
  return (%z))IR",
                                      {torch::linspace(0.25, 5, 20)}));
  EXPECT_TRUE(matches_torch_pointwise(
      two + "aten::special_zeta(%a, %b)\n  return (%y)\n",
      {torch::arange(2, 8, torch::kLong), torch::arange(1, 7, torch::kLong)}));
}

TEST(ConvertElementwiseSpecial, IntegerAndHalfInputs) {
  const at::Tensor i = torch::arange(-5, 20, torch::kLong);
  for (const char* op :
       {"aten::special_gammaln", "aten::digamma", "aten::i0", "aten::special_ndtr"}) {
    EXPECT_TRUE(matches_torch_pointwise(unary_ir(op), {i})) << op;
  }
  const at::Tensor h = torch::linspace(-8, 8, 65).to(torch::kHalf);
  for (const char* op : {"aten::special_gammaln", "aten::digamma", "aten::erfinv", "aten::i0",
                         "aten::special_i0e", "aten::special_i1", "aten::special_ndtr"}) {
    EXPECT_TRUE(matches_torch_pointwise(unary_ir(op), {h}, 2e-3, 1e-3)) << op;
  }
}

const char* const kPolynomials[] = {
    "aten::special_chebyshev_polynomial_t",         "aten::special_chebyshev_polynomial_u",
    "aten::special_chebyshev_polynomial_v",         "aten::special_chebyshev_polynomial_w",
    "aten::special_shifted_chebyshev_polynomial_t", "aten::special_shifted_chebyshev_polynomial_u",
    "aten::special_shifted_chebyshev_polynomial_v", "aten::special_shifted_chebyshev_polynomial_w",
    "aten::special_hermite_polynomial_h",           "aten::special_hermite_polynomial_he",
    "aten::special_laguerre_polynomial_l",          "aten::special_legendre_polynomial_p"};

// Every pair of x (by eighths over [-3, 3], the ends of [-1, 1] and [0, 1], edges) and a degree
// (negative, fractional, through the recurrences and the trig forms, NaN, inf). The engine rounds
// as torch's float kernels do: 1e-6 leaves room for a libm that rounds cos or acos differently.
// Not NaN x with n >= 2: torch's loop stops at once there and returns an uninitialized value.
TEST(ConvertElementwiseSpecial, OrthogonalPolynomialsOfTwoTensors) {
  std::vector<double> xs;
  for (int i = -24; i <= 24; ++i) xs.push_back(i / 8.0);
  for (double v : {-0.999, 0.001, 0.999, 1.001, 1e30, -1e30, -kInf, kInf, kNan}) xs.push_back(v);
  std::vector<double> x, n;
  for (double u : xs) {
    for (double d :
         {-1.0, 0.0, 0.5, 1.0, 2.0, 3.7, 5.0, 6.0, 7.0, 9.0, 12.0, 20.0, 40.0, -kInf, kInf, kNan}) {
      if (std::isnan(u) && d >= 2) continue;
      x.push_back(u);
      n.push_back(d);
    }
  }
  const std::string two = "graph(%x : Tensor, %n : Tensor):\n  %y : Tensor = ";
  for (const char* op : kPolynomials) {
    EXPECT_TRUE(matches_torch_pointwise(two + op + "(%x, %n)\n  return (%y)\n",
                                        {floats(x), floats(n)}, 1e-6, 1e-6))
        << op;
  }
}

// The overloads of a number x or n, and integers, which torch computes in f32 (the degree an
// integer tensor promoted with x, the number n truncated).
TEST(ConvertElementwiseSpecial, OrthogonalPolynomialsOfNumbersAndIntegers) {
  const at::Tensor x = torch::linspace(-1.5, 1.5, 25);
  const at::Tensor degrees = torch::arange(-1, 24, torch::kLong);
  const at::Tensor integers = torch::arange(-3, 4, torch::kLong);
  for (const std::string op : kPolynomials) {
    EXPECT_TRUE(matches_torch_pointwise(R"IR(
graph(%x : Tensor):
  %n : int = prim::Constant[value=11]()
  %y : Tensor = )IR" + op + "(%x, %n)\n  return (%y)\n",
                                        {x}, 1e-6, 1e-6))
        << op << " n_scalar int";
    EXPECT_TRUE(matches_torch_pointwise(R"IR(
graph(%x : Tensor):
  %n : float = prim::Constant[value=6.5]()
  %y : Tensor = )IR" + op + "(%x, %n)\n  return (%y)\n",
                                        {integers}, 1e-6, 1e-6))
        << op << " n_scalar float of integers";
    EXPECT_TRUE(matches_torch_pointwise(R"IR(
graph(%n : Tensor):
  %x : float = prim::Constant[value=0.3]()
  %y : Tensor = )IR" + op + "(%x, %n)\n  return (%y)\n",
                                        {degrees}, 1e-6, 1e-6))
        << op << " x_scalar";
    EXPECT_TRUE(matches_torch_pointwise(R"IR(
graph(%n : Tensor):
  %x : int = prim::Constant[value=2]()
  %y : Tensor = )IR" + op + "(%x, %n)\n  return (%y)\n",
                                        {degrees}, 1e-6, 1e-6))
        << op << " x_scalar int";
    EXPECT_TRUE(matches_torch_pointwise(
        "graph(%x : Tensor, %n : Tensor):\n  %y : Tensor = " + op + "(%x, %n)\n  return (%y)\n",
        {integers.reshape({7, 1}), torch::arange(0, 9, torch::kLong)}, 1e-6, 1e-6))
        << op << " integer tensors";
  }
}

// torch has no 16-bit float kernels of the polynomials (it raises); neither has kiln.
TEST(ConvertElementwiseSpecial, OrthogonalPolynomialsOfHalfFloatsAreRejected) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %n : int = prim::Constant[value=3]()
  %y : Tensor = aten::special_legendre_polynomial_p(%x, %n)
  return (%y))IR";
  try {
    run_converted(ir, {torch::linspace(-1, 1, 5).to(torch::kHalf)});
    FAIL() << "converted f16";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(e.message().find("aten::special_legendre_polynomial_p of f16"), std::string::npos)
        << e.message();
  }
}

TEST(ConvertElementwiseSpecial, NonConstantOrdersAreLeftToTorch) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %n : int):
  %y : Tensor = aten::polygamma(%n, %x)
  return (%y))IR");
  const Support s = default_registry().supports(*g->nodes().begin());
  EXPECT_FALSE(s.supported);
  EXPECT_EQ(s.reason, "polygamma's order n must be a constant integer >= 0");
  auto m = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %p : int = prim::Constant[value=0]()
  %y : Tensor = aten::mvlgamma(%x, %p)
  return (%y))IR");
  const Support t = default_registry().supports(*std::next(m->nodes().begin()));
  EXPECT_FALSE(t.supported);
  EXPECT_EQ(t.reason, "mvlgamma's p must be a constant integer >= 1");
}

}  // namespace
}  // namespace kiln::conversion
