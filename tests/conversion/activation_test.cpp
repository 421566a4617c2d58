// Activation converters against libtorch on the CPU backend.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

std::string unary_ir(const std::string& op, const std::string& extra_consts = "",
                     const std::string& extra_args = "") {
  return "graph(%x : Tensor):\n" + extra_consts + "  %y : Tensor = " + op + "(%x" + extra_args +
         ")\n  return (%y)\n";
}

TEST(ConvertActivation, EveryActivationMatchesTorch) {
  torch::manual_seed(0);
  const auto x = torch::randn({2, 3, 5}) * 4;
  for (const char* op :
       {"aten::relu", "aten::sigmoid", "aten::tanh", "aten::silu", "aten::hardswish",
        "aten::hardsigmoid", "aten::mish", "aten::selu", "aten::relu6"}) {
    EXPECT_TRUE(matches_torch(unary_ir(op), {x})) << op;
  }
  for (const char* approximate : {"none", "tanh"}) {
    EXPECT_TRUE(matches_torch(
        unary_ir("aten::gelu",
                 std::string("  %a : str = prim::Constant[value=\"") + approximate + "\"]()\n",
                 ", %a"),
        {x}));
  }
  EXPECT_TRUE(matches_torch(
      unary_ir("aten::leaky_relu", "  %s : float = prim::Constant[value=0.2]()\n", ", %s"), {x}));
  EXPECT_TRUE(matches_torch(
      unary_ir(
          "aten::elu",
          "  %a : float = prim::Constant[value=0.7]()\n  %one : int = prim::Constant[value=1]()\n",
          ", %a, %one, %one"),
      {x}));
  EXPECT_TRUE(matches_torch(
      unary_ir("aten::softplus",
               "  %b : int = prim::Constant[value=2]()\n  %t : int = prim::Constant[value=5]()\n",
               ", %b, %t"),
      {x}));
  EXPECT_TRUE(matches_torch(unary_ir("aten::hardtanh",
                                     "  %lo : float = prim::Constant[value=-1.5]()\n  %hi : float "
                                     "= prim::Constant[value=2.]()\n",
                                     ", %lo, %hi"),
                            {x}));
}

// NaN stays NaN through the clamp family, as in torch (min/max written as selects that keep it).
TEST(ConvertActivation, ClampFamilyKeepsNaN) {
  auto x = torch::randn({4, 70}) * 8;  // over 64 elements: the vectorized loops run too
  x.index_put_({0, 3}, NAN);
  x.index_put_({2, 65}, NAN);
  for (const char* op : {"aten::hardswish", "aten::hardsigmoid", "aten::relu6"}) {
    EXPECT_TRUE(matches_torch(unary_ir(op), {x})) << op;
  }
  EXPECT_TRUE(matches_torch(unary_ir("aten::clamp",
                                     "  %lo : float = prim::Constant[value=-1.5]()\n  %hi : float "
                                     "= prim::Constant[value=2.]()\n",
                                     ", %lo, %hi"),
                            {x}));
}

TEST(ConvertActivation, ClampWithNoneAndIntegers) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %hi : int = prim::Constant[value=3]()
  %y : Tensor = aten::clamp(%x, %none, %hi)
  return (%y))IR";
  EXPECT_TRUE(matches_torch(ir, {torch::randn({4, 4}) * 5}));
  EXPECT_TRUE(matches_torch(ir, {torch::randint(-10, 10, {4, 4}, torch::kLong)}, 0, 0));
}

TEST(ConvertActivation, NonConstantParametersAreRejectedByTheValidator) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %s : float):
  %y : Tensor = aten::leaky_relu(%x, %s)
  return (%y))IR");
  const Support s = default_registry().supports(*g->nodes().begin());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("must be a constant"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
