// Cast converters (aten::to overloads, type_as) against libtorch on the CPU backend.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

std::string to_dtype_ir(int dtype) {
  return R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=)IR" +
         std::to_string(dtype) + R"IR(]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::to(%x, %d, %f, %f, %none)
  return (%y))IR";
}

TEST(ConvertCast, ToDtypeBetweenEveryEngineDtype) {
  const auto f = torch::randn({3, 4}) * 50;
  const std::vector<at::Tensor> inputs = {f, f.to(torch::kLong), f.to(torch::kInt),
                                          f.to(torch::kHalf), (f > 0)};
  for (const auto& x : inputs) {
    for (at::ScalarType t : {at::kFloat, at::kHalf, at::kBFloat16, at::kLong, at::kInt, at::kChar,
                             at::kByte, at::kBool}) {
      if (x.scalar_type() != at::kBool && (t == at::kByte || t == at::kChar)) continue;  // wraps
      EXPECT_TRUE(matches_torch(to_dtype_ir(static_cast<int>(t)), {x}, 0, 0))
          << x.scalar_type() << " -> " << t;
    }
  }
  // Large int64 values stay exact.
  EXPECT_TRUE(matches_torch(to_dtype_ir(static_cast<int>(at::kLong)),
                            {torch::tensor({int64_t{1} << 60, -(int64_t{1} << 55) - 1})}, 0, 0));
}

TEST(ConvertCast, DoubleTargetsBecomeFloat) {
  const auto out = testing::run_converted(to_dtype_ir(static_cast<int>(at::kDouble)),
                                          {torch::arange(6, torch::kLong)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(out[0], torch::arange(6, torch::kFloat)));
}

TEST(ConvertCast, DeviceLayoutAndOtherOverloads) {
  const auto x = torch::randn({2, 5}) * 10;
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %dev : Device = prim::Constant[value="cpu"]()
  %d : int = prim::Constant[value=4]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::to(%x, %dev, %d, %f, %f, %none)
  return (%y))IR",
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=3]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::to(%x, %d, %none, %none, %none, %f, %f, %none)
  return (%y))IR",
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %f : bool = prim::Constant[value=0]()
  %y : Tensor = aten::to(%x, %none, %none, %f, %f)
  return (%y))IR",
                            {x}, 0, 0));
  for (const char* op : {"aten::type_as(%x, %o)", "aten::to(%x, %o, %f, %f, %none)"}) {
    const std::string ir = std::string(R"IR(
graph(%x : Tensor, %o : Tensor):
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %y : Tensor = )IR") + op +
                           "\n  return (%y)";
    EXPECT_TRUE(matches_torch(ir, {x, torch::zeros({1}, torch::kInt)}, 0, 0)) << op;
    EXPECT_TRUE(matches_torch(ir, {x, torch::zeros({1}, torch::kHalf)}, 0, 0)) << op;
  }
}

TEST(ConvertCast, ValidatorRejectsDtypesWithoutEngineCounterpart) {
  auto g = kiln::testing::parse(to_dtype_ir(static_cast<int>(at::kComplexFloat)));
  const torch::jit::Node* to = g->outputs()[0]->node();
  const Support s = default_registry().supports(to);
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("no engine counterpart"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
