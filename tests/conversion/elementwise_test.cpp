// Elementwise converters against libtorch: broadcasting, scalars, type promotion, integers.
#include <limits>

#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

std::string binary_ir(const std::string& op, const std::string& b_type = "Tensor",
                      const std::string& tail = "") {
  return "graph(%a : Tensor, %b : " + b_type + "):\n  %one : int = prim::Constant[value=1]()\n" +
         "  %y : Tensor = " + op + "(%a, %b" + tail + ")\n  return (%y)\n";
}

TEST(ConvertElementwise, TensorTensorWithBroadcasting) {
  torch::manual_seed(1);
  const auto a = torch::randn({2, 3, 4}), b = torch::randn({3, 1}) + 3;
  EXPECT_TRUE(matches_torch(binary_ir("aten::add", "Tensor", ", %one"), {a, b}));
  EXPECT_TRUE(matches_torch(binary_ir("aten::sub", "Tensor", ", %one"), {a, b}));
  for (const char* op :
       {"aten::mul", "aten::div", "aten::maximum", "aten::minimum", "aten::pow", "aten::remainder",
        "aten::floor_divide", "aten::eq", "aten::lt", "aten::ge"}) {
    EXPECT_TRUE(matches_torch(binary_ir(op), {a.abs() + 0.5, b})) << op;
  }
}

TEST(ConvertElementwise, AlphaScalarsAndRsub) {
  const auto a = torch::randn({5}), b = torch::randn({5});
  const std::string with_alpha = R"IR(
graph(%a : Tensor, %b : Tensor):
  %alpha : float = prim::Constant[value=2.5]()
  %s : float = prim::Constant[value=0.5]()
  %y : Tensor = aten::sub(%a, %b, %alpha)
  %z : Tensor = aten::add(%y, %s, %alpha)
  %w : Tensor = aten::rsub(%z, %s, %alpha)
  return (%w))IR";
  EXPECT_TRUE(matches_torch(with_alpha, {a, b}));
}

TEST(ConvertElementwise, TypePromotionFollowsTorch) {
  const auto i = torch::randint(-5, 5, {2, 3}, torch::kLong);
  const auto f = torch::randn({2, 3});
  const auto h = torch::randn({2, 3}).to(torch::kHalf);
  // int tensor * float scalar -> float; int / int -> float; int + int stays int64 exactly.
  EXPECT_TRUE(matches_torch(R"IR(
graph(%i : Tensor):
  %s : float = prim::Constant[value=1.5]()
  %y : Tensor = aten::mul(%i, %s)
  return (%y))IR",
                            {i}));
  EXPECT_TRUE(matches_torch(binary_ir("aten::div"), {i, i.abs() + 1}));
  EXPECT_TRUE(matches_torch(binary_ir("aten::add", "Tensor", ", %one"), {i * 1000000000, i}, 0, 0));
  EXPECT_TRUE(matches_torch(binary_ir("aten::add", "Tensor", ", %one"), {i, f}));
  // half tensor + float 0-d tensor stays half, as in torch.
  EXPECT_TRUE(matches_torch(binary_ir("aten::mul"), {h, torch::scalar_tensor(2.0)}, 1e-3, 1e-3));
  // int scalar with a bool tensor gives int64.
  EXPECT_TRUE(matches_torch(R"IR(
graph(%m : Tensor):
  %s : int = prim::Constant[value=3]()
  %y : Tensor = aten::mul(%m, %s)
  return (%y))IR",
                            {torch::rand({4}) > 0.5}, 0, 0));
}

TEST(ConvertElementwise, DivRoundingModesAndLogical) {
  const auto a = torch::tensor({7, -7, 7, -7, 0}, torch::kLong);
  const auto b = torch::tensor({2, 2, -2, -2, 3}, torch::kLong);
  for (const char* mode : {"floor", "trunc"}) {
    const std::string ir =
        std::string("graph(%a : Tensor, %b : Tensor):\n  %m : str = prim::Constant[value=\"") +
        mode + "\"]()\n  %y : Tensor = aten::div(%a, %b, %m)\n  return (%y)\n";
    EXPECT_TRUE(matches_torch(ir, {a, b}, 0, 0)) << mode;
    EXPECT_TRUE(matches_torch(ir, {a.to(torch::kFloat) * 0.7, b.to(torch::kFloat)})) << mode;
  }
  const auto p = torch::rand({6}) > 0.5, q = torch::rand({6}) > 0.5;
  EXPECT_TRUE(matches_torch(binary_ir("aten::logical_and"), {p, q}, 0, 0));
  EXPECT_TRUE(matches_torch(binary_ir("aten::logical_xor"), {p, q}, 0, 0));
  // &, |, ^: logical on bools, bitwise on integers (promoted as torch does).
  const auto i = torch::tensor({12, -7, 5, 0, 3, 9}, torch::kLong);
  const auto k = torch::tensor({10, 3, -1, 6, 3, 0}, torch::kInt);
  for (const char* op : {"aten::__and__", "aten::__or__", "aten::__xor__", "aten::bitwise_and",
                         "aten::bitwise_or", "aten::bitwise_xor"}) {
    EXPECT_TRUE(matches_torch(binary_ir(op), {p, q}, 0, 0)) << op;
    EXPECT_TRUE(matches_torch(binary_ir(op), {i, k}, 0, 0)) << op;
    EXPECT_TRUE(matches_torch(binary_ir(op), {i, p}, 0, 0)) << op;
  }
  try {
    testing::run_converted(binary_ir("aten::__and__"), {torch::randn({3}), torch::randn({3})});
    ADD_FAILURE() << "a bitwise and of floats converted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bitwise ops take integers and bools"), std::string::npos)
        << e.what();
  }
}

TEST(ConvertElementwise, UnaryMathAndIntegers) {
  const auto x = torch::rand({3, 4}) + 0.1;
  for (const char* op : {"aten::exp", "aten::log", "aten::sqrt", "aten::rsqrt", "aten::reciprocal",
                         "aten::sin", "aten::cos", "aten::erf", "aten::floor", "aten::ceil",
                         "aten::round", "aten::neg", "aten::abs", "aten::log1p", "aten::sign"}) {
    const std::string ir =
        std::string("graph(%x : Tensor):\n  %y : Tensor = ") + op + "(%x)\n  return (%y)\n";
    EXPECT_TRUE(matches_torch(ir, {x * 3 - 1})) << op;
  }
  EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n  %y : Tensor = aten::neg(%x)\n  return (%y)\n",
                            {torch::randint(-9, 9, {5}, torch::kInt)}, 0, 0));
}

// copysign and signbit read the sign bit itself: -0 and NaNs of either sign included, in f32 and
// f16; integers give copysign's floats and signbit's x < 0.
TEST(ConvertElementwise, CopysignAndSignbitReadTheSignBit) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto a = torch::tensor({1.5f, -2.f, 0.f, -0.f, 3.f, nan, 4.f, -5.f});
  const auto b = torch::tensor({-1.f, 2.f, -0.f, 0.f, -nan, -3.f, nan, 7.f});
  const auto same = [](const at::Tensor& got, const at::Tensor& want) {
    return got.scalar_type() == want.scalar_type() &&
           at::equal(at::signbit(got), at::signbit(want)) &&
           at::allclose(got.to(at::kFloat), want.to(at::kFloat), 0, 0, /*equal_nan=*/true);
  };
  const std::string copysign = binary_ir("aten::copysign");
  for (const auto dtype : {at::kFloat, at::kHalf}) {
    const auto x = a.to(dtype), y = b.to(dtype);
    EXPECT_TRUE(same(testing::run_converted(copysign, {x, y})[0], at::copysign(x, y))) << dtype;
    const std::string signbit =
        "graph(%x : Tensor):\n  %y : Tensor = aten::signbit(%x)\n"
        "  return (%y)\n";
    EXPECT_TRUE(same(testing::run_converted(signbit, {y})[0], at::signbit(y))) << dtype;
  }
  const auto i = torch::tensor({-3, 0, 4, -1}, torch::kLong);
  const auto j = torch::tensor({2, -7, -1, 0}, torch::kLong);
  EXPECT_TRUE(same(testing::run_converted(copysign, {i, j})[0], at::copysign(i, j)));
  EXPECT_TRUE(same(testing::run_converted(R"IR(
graph(%x : Tensor):
  %s : float = prim::Constant[value=-2.5]()
  %y : Tensor = aten::copysign(%x, %s)
  return (%y))IR",
                                          {a})[0],
                   at::copysign(a, -2.5)));
  EXPECT_TRUE(
      matches_torch("graph(%x : Tensor):\n  %y : Tensor = aten::signbit(%x)\n"
                    "  return (%y)\n",
                    {i}, 0, 0));
}

TEST(ConvertElementwise, BitwiseNotFlipsBitsOfIntegersAndNegatesBools) {
  const std::string ir =
      "graph(%x : Tensor):\n  %y : Tensor = aten::bitwise_not(%x)\n"
      "  return (%y)\n";
  EXPECT_TRUE(matches_torch(
      ir, {torch::tensor(std::vector<int64_t>{-3, 0, 7, INT64_MAX, INT64_MIN})}, 0, 0));
  EXPECT_TRUE(matches_torch(ir, {torch::tensor({-3, 0, 7}, torch::kInt)}, 0, 0));
  EXPECT_TRUE(matches_torch(ir, {torch::tensor({true, false})}, 0, 0));
  EXPECT_THROW(testing::run_converted(ir, {torch::randn({3})}), Error);
}

TEST(ConvertElementwise, NonConstantAlphaIsRejected) {
  auto g = kiln::testing::parse(R"IR(
graph(%a : Tensor, %b : Tensor, %alpha : int):
  %y : Tensor = aten::add(%a, %b, %alpha)
  return (%y))IR");
  const Support s = default_registry().supports(*g->nodes().begin());
  EXPECT_FALSE(s.supported);
  EXPECT_EQ(s.reason, "alpha must be a constant");
}

}  // namespace
}  // namespace kiln::conversion
