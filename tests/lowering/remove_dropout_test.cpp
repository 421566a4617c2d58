// remove_dropout: every eval-mode dropout variant goes, in sub-blocks too; train=True stays.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(RemoveDropout, RemovesEveryEvalVariantInsideBlocks) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %c : bool):
  %p : float = prim::Constant[value=0.5]()
  %f : bool = prim::Constant[value=0]()
  %a : Tensor = aten::dropout(%x, %p, %f)
  %b : Tensor = aten::feature_dropout(%a, %p, %f)
  %d : Tensor = aten::alpha_dropout_(%b, %p, %f)
  %r : Tensor = prim::If(%c)
    block0():
      %e : Tensor = aten::feature_alpha_dropout(%d, %p, %f)
      %g : Tensor = aten::relu(%e)
      -> (%g)
    block1():
      %h : Tensor = aten::dropout_(%d, %p, %f)
      -> (%h)
  return (%r))IR");
  auto before = g->copy();
  EXPECT_TRUE(remove_dropout(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: dropout\nCHECK: aten::relu(%x)", *g));
  for (bool c : {true, false}) {
    EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({2, 3}), c}));
  }
}

TEST(RemoveDropout, KeepsTrainingOrUnknownMode) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %train : bool):
  %p : float = prim::Constant[value=0.5]()
  %t : bool = prim::Constant[value=1]()
  %a : Tensor = aten::dropout(%x, %p, %t)
  %b : Tensor = aten::feature_dropout(%a, %p, %train)
  return (%b))IR");
  EXPECT_FALSE(remove_dropout(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::dropout\nCHECK: aten::feature_dropout", *g));
}

TEST(RemoveDropout, RemovesZeroProbabilityEvenWhenTraining) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %p : float = prim::Constant[value=0.]()
  %t : bool = prim::Constant[value=1]()
  %a : Tensor = aten::dropout(%x, %p, %t)
  %b : Tensor = aten::relu(%a)
  return (%b))IR");
  auto before = g->copy();
  EXPECT_TRUE(remove_dropout(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: dropout\nCHECK: aten::relu(%x)", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({2, 3})}));
}

}  // namespace
}  // namespace kiln::lowering
