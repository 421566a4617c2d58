// The block converter: evaluators, outputs that alias inputs, and clear errors.
#include "conversion/convert.h"

#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

TEST(Convert, StaticSizesAndArithmeticAreEvaluated) {
  // y = x * (x.size(1) // 2 + 1) : the scalar is computed at compile time.
  const std::string ir = R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %n : int = aten::size(%x, %one)
  %h : int = aten::floordiv(%n, %two)
  %k : int = aten::add(%h, %one)
  %y : Tensor = aten::mul(%x, %k)
  return (%y))IR";
  EXPECT_TRUE(testing::matches_torch(ir, {torch::randn({2, 6})}));
  auto out = testing::run_converted(ir, {torch::ones({2, 6})});
  EXPECT_EQ(out[0][0][0].item<float>(), 4.f);
}

TEST(Convert, OutputsThatAliasInputsOrRepeat) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::relu(%x)
  return (%x, %y, %y))IR";
  auto x = torch::randn({3});
  auto out = testing::run_converted(ir, {x});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].equal(x));
  EXPECT_TRUE(out[1].equal(x.relu()));
  EXPECT_TRUE(out[2].equal(x.relu()));
}

TEST(Convert, UnconvertibleNodesAreNamed) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::conj_physical(%x)
  return (%y))IR");
  try {
    convert_graph(*g, {InputSpec::fixed(engine::DataType::kF32, {2})});
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(e.message().find("aten::conj_physical(%x)"), std::string::npos) << e.message();
  }
  EXPECT_FALSE(default_registry().supports(*g->nodes().begin()).supported);
  EXPECT_EQ(default_registry().supports(*g->nodes().begin()).reason,
            "no converter for aten::conj_physical");
}

TEST(Convert, BadInputSpecs) {
  auto g = kiln::testing::parse("graph(%x : Tensor, %n : int):\n  return (%x)\n");
  EXPECT_THROW(convert_graph(*g, {InputSpec::fixed(engine::DataType::kF32, {2})}), InvalidArgument);
  EXPECT_THROW(convert_graph(*g, {InputSpec::fixed(engine::DataType::kF32, {2}),
                                  InputSpec::fixed(engine::DataType::kI64, {})}),
               InvalidArgument);
}

TEST(Convert, DynamicBatchBecomesAProfile) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::sigmoid(%x)
  return (%y))IR");
  InputSpec spec{engine::DataType::kF32, {1, 4}, {2, 4}, {8, 4}};
  ConvertedSegment seg = convert_graph(*g, {spec});
  const auto& in = seg.network.tensor(seg.network.inputs()[0]);
  EXPECT_EQ(in.shape, (engine::Shape{engine::kDynamic, 4}));
  EXPECT_EQ(seg.network.profile(seg.network.inputs()[0]).max, (engine::Shape{8, 4}));
}

}  // namespace
}  // namespace kiln::conversion
