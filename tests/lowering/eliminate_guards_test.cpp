// eliminate_guards: assert ops that only check are removed; computing ops stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(EliminateGuards, RemovesAssertOpsInBlocks) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %c : bool):
  %zero : int = prim::Constant[value=0]()
  %ok : Tensor = aten::gt(%x, %zero)
  %all : Tensor = aten::all(%ok)
  aten::_assert_async(%all)
  %r : Tensor = prim::If(%c)
    block0():
      aten::_assert_async(%all)
      %y : Tensor = aten::relu(%x)
      -> (%y)
    block1():
      -> (%x)
  return (%r))IR");
  auto before = g->copy();
  EXPECT_TRUE(eliminate_guards(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::_assert_async\nCHECK: aten::relu", *g));
  for (bool c : {true, false}) {
    EXPECT_TRUE(testing::same_values(*before, *g, {torch::rand({2, 3}) + 0.5, c}));
  }
}

TEST(EliminateGuards, LeavesOtherNodes) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %msg : str = prim::Constant[value="hi"]()
  prim::Print(%msg)
  %y : Tensor = aten::relu(%x)
  return (%y))IR");
  EXPECT_FALSE(eliminate_guards(g));
  EXPECT_TRUE(testing::file_check("CHECK: prim::Print\nCHECK: aten::relu", *g));
}

}  // namespace
}  // namespace kiln::lowering
