// remove_exceptions: If with a raising branch becomes the other branch; others stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(RemoveExceptions, RemovesBatchNormStyleDimCheck) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %four : int = prim::Constant[value=4]()
  %fmt : str = prim::Constant[value="expected 4D input (got {}D input)"]()
  %none : NoneType = prim::Constant()
  %dim : int = aten::dim(%x)
  %bad : bool = aten::ne(%dim, %four)
  prim::If(%bad)
    block0():
      %msg : str = aten::format(%fmt, %dim)
      prim::RaiseException(%msg, %none)
      -> ()
    block1():
      -> ()
  %y : Tensor = aten::relu(%x)
  return (%y))IR");
  auto before = g->copy();
  EXPECT_TRUE(remove_exceptions(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: prim::If\nCHECK-NOT: prim::RaiseException", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{1, 2, 3, 4}})));
}

TEST(RemoveExceptions, InlinesTheBranchThatComputesInNestedBlocks) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %c : bool, %d : bool):
  %msg : str = prim::Constant[value="bad"]()
  %none : NoneType = prim::Constant()
  %r : Tensor = prim::If(%c)
    block0():
      %s : Tensor = prim::If(%d)
        block0():
          prim::RaiseException(%msg, %none)
          %u : Tensor = prim::Uninitialized()
          -> (%u)
        block1():
          %t : Tensor = aten::tanh(%x)
          -> (%t)
      -> (%s)
    block1():
      %e : Tensor = aten::exp(%x)
      -> (%e)
  return (%r))IR");
  auto before = g->copy();
  EXPECT_TRUE(remove_exceptions(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK: prim::If\nCHECK: aten::tanh\nCHECK-NOT: prim::If\nCHECK: aten::exp", *g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: RaiseException", *g));
  for (bool c : {true, false}) {
    EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({3}), c, false}));
  }
}

TEST(RemoveExceptions, KeepsBranchesWithOtherSideEffectsAndAlwaysRaising) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %c : bool):
  %msg : str = prim::Constant[value="bad"]()
  %none : NoneType = prim::Constant()
  prim::If(%c)
    block0():
      prim::Print(%msg)
      prim::RaiseException(%msg, %none)
      -> ()
    block1():
      -> ()
  prim::If(%c)
    block0():
      prim::RaiseException(%msg, %none)
      -> ()
    block1():
      prim::RaiseException(%msg, %none)
      -> ()
  return (%x))IR");
  EXPECT_FALSE(remove_exceptions(g));
  EXPECT_TRUE(testing::file_check("CHECK: prim::If\nCHECK: prim::If", *g));
}

}  // namespace
}  // namespace kiln::lowering
