// remove_flatten_before_linear: a flatten that keeps the shape, used by linear, goes.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(RemoveFlattenBeforeLinear, RemovesShapePreservingFlatten) {
  auto g = testing::parse(R"IR(
graph(%x : Float(2, 8), %u : Tensor, %w : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %m1 : int = prim::Constant[value=-1]()
  %two : int = prim::Constant[value=2]()
  %f : Tensor = aten::flatten(%x, %one, %m1)
  %y : Tensor = aten::linear(%f, %w, %b)
  %g : Tensor = aten::flatten(%u, %two, %two)
  %z : Tensor = aten::linear(%g, %w, %b)
  return (%y, %z))IR");
  auto before = g->copy();
  EXPECT_TRUE(remove_flatten_before_linear(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::flatten\nCHECK: aten::linear(%x\nCHECK: aten::linear(%u", *g));
  EXPECT_TRUE(
      testing::same_values(*before, *g, testing::random_inputs({{2, 8}, {2, 3, 8}, {4, 8}, {4}})));
}

TEST(RemoveFlattenBeforeLinear, KeepsFlattenThatReshapesOrHasOtherUsers) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor, %w2 : Tensor):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %m1 : int = prim::Constant[value=-1]()
  %f : Tensor = aten::flatten(%x, %one, %m1)
  %y : Tensor = aten::linear(%f, %w, %b)
  %g : Tensor = aten::flatten(%x, %zero, %zero)
  %z : Tensor = aten::linear(%g, %w2, %b)
  return (%y, %z))IR");
  auto before = g->copy();
  EXPECT_FALSE(remove_flatten_before_linear(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::flatten\nCHECK: aten::flatten", *g));
  EXPECT_TRUE(
      testing::same_values(*before, *g, testing::random_inputs({{2, 2, 4}, {4, 8}, {4}, {4, 4}})));
}

}  // namespace
}  // namespace kiln::lowering
