// propagate_constants: folds constant subgraphs and constant branches; runtime values stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(PropagateConstants, FoldsFrozenFlagsAndArithmetic) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %training : bool = prim::Constant[value=0]()
  %two : int = prim::Constant[value=2]()
  %three : int = prim::Constant[value=3]()
  %six : int = aten::mul(%two, %three)
  %r : Tensor = prim::If(%training)
    block0():
      %e : Tensor = aten::exp(%x)
      -> (%e)
    block1():
      %m : Tensor = aten::mul(%x, %six)
      -> (%m)
  return (%r))IR");
  auto before = g->copy();
  EXPECT_TRUE(propagate_constants(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: prim::If\nCHECK-NOT: aten::exp\nCHECK: prim::Constant[value=6]\n"
      "CHECK: aten::mul(%x",
      *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{4}})));
}

TEST(PropagateConstants, LeavesRuntimeValues) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %n : int):
  %two : int = prim::Constant[value=2]()
  %m : int = aten::mul(%n, %two)
  %y : Tensor = aten::mul(%x, %m)
  return (%y))IR");
  EXPECT_FALSE(propagate_constants(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::mul(%n\nCHECK: aten::mul(%x", *g));
}

}  // namespace
}  // namespace kiln::lowering
