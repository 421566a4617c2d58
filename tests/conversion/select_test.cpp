// where and masked_fill converters against libtorch on the CPU backend.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

TEST(ConvertSelect, WhereBroadcastsAndPromotes) {
  const std::string ir = R"IR(
graph(%c : Tensor, %a : Tensor, %b : Tensor):
  %y : Tensor = aten::where(%c, %a, %b)
  return (%y))IR";
  const auto cond = torch::rand({2, 1, 4}) > 0.5;
  EXPECT_TRUE(matches_torch(ir, {cond, torch::randn({3, 4}), torch::randn({2, 3, 1})}, 0, 0));
  EXPECT_TRUE(matches_torch(
      ir,
      {cond, torch::randint(-9, 9, {3, 4}, torch::kLong), torch::randint(-9, 9, {4}, torch::kLong)},
      0, 0));
  EXPECT_TRUE(matches_torch(
      ir, {cond, torch::randint(-9, 9, {3, 4}, torch::kInt), torch::randn({2, 3, 4})}, 0, 0));
}

TEST(ConvertSelect, WhereWithScalars) {
  const auto cond = torch::rand({3, 4}) > 0.5;
  const auto x = torch::randn({3, 4});
  EXPECT_TRUE(matches_torch(R"IR(
graph(%c : Tensor, %x : Tensor):
  %v : float = prim::Constant[value=0.5]()
  %y : Tensor = aten::where(%c, %x, %v)
  return (%y))IR",
                            {cond, x}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%c : Tensor, %x : Tensor):
  %v : int = prim::Constant[value=3]()
  %y : Tensor = aten::where(%c, %v, %x)
  return (%y))IR",
                            {cond, torch::randint(0, 9, {3, 4}, torch::kLong)}, 0, 0));
}

TEST(ConvertSelect, MaskedFillKeepsDtype) {
  const auto mask = torch::rand({1, 4}) > 0.5;
  const std::string scalar = R"IR(
graph(%x : Tensor, %m : Tensor):
  %v : float = prim::Constant[value=-2.5]()
  %y : Tensor = aten::masked_fill(%x, %m, %v)
  return (%y))IR";
  EXPECT_TRUE(matches_torch(scalar, {torch::randn({3, 4}), mask}, 0, 0));
  const std::string int_scalar = R"IR(
graph(%x : Tensor, %m : Tensor):
  %v : int = prim::Constant[value=-7]()
  %y : Tensor = aten::masked_fill(%x, %m, %v)
  return (%y))IR";
  EXPECT_TRUE(
      matches_torch(int_scalar, {torch::randint(0, 100, {3, 4}, torch::kLong), mask}, 0, 0));
  EXPECT_TRUE(matches_torch(int_scalar, {torch::randn({3, 4}).to(torch::kHalf), mask}, 0, 0));
  const std::string tensor = R"IR(
graph(%x : Tensor, %m : Tensor, %v : Tensor):
  %y : Tensor = aten::masked_fill(%x, %m, %v)
  return (%y))IR";
  EXPECT_TRUE(matches_torch(tensor, {torch::randn({3, 4}), mask, torch::tensor(4.0)}, 0, 0));
}

TEST(ConvertSelect, ValidatorRejectsRuntimeScalars) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %m : Tensor, %t : Tensor):
  %v : float = aten::Float(%t)
  %y : Tensor = aten::masked_fill(%x, %m, %v)
  return (%y))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("graph input"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
