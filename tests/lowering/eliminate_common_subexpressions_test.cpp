// eliminate_common_subexpressions: merges identical pure nodes, not mutated or impure ones.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(EliminateCommonSubexpressions, MergesIdenticalPureNodes) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::relu(%x)
  %s : Tensor = aten::add(%a, %b, %one)
  return (%s))IR");
  auto before = g->copy();
  EXPECT_TRUE(eliminate_common_subexpressions(g));
  EXPECT_TRUE(
      testing::file_check("CHECK: aten::relu\nCHECK-NOT: aten::relu\nCHECK: aten::add(%a, %a", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{5}})));
}

TEST(EliminateCommonSubexpressions, KeepsNodesSeparatedByAWrite) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %y : Tensor = aten::clone(%x, %one)
  %a : Tensor = aten::relu(%y)
  %w : Tensor = aten::add_(%y, %one, %one)
  %b : Tensor = aten::relu(%y)
  %s : Tensor = aten::add(%a, %b, %one)
  return (%s))IR");
  auto before = g->copy();
  EXPECT_FALSE(eliminate_common_subexpressions(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::relu\nCHECK: aten::relu", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{5}})));
}

}  // namespace
}  // namespace kiln::lowering
