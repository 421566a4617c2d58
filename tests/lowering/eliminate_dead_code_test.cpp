// eliminate_dead_code: removes unused pure nodes (also in blocks), keeps side effects.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(EliminateDeadCode, RemovesUnusedNodesInsideBlocks) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %c : bool):
  %unused : Tensor = aten::sigmoid(%x)
  %r : Tensor = prim::If(%c)
    block0():
      %dead : Tensor = aten::tanh(%x)
      %a : Tensor = aten::relu(%x)
      -> (%a)
    block1():
      -> (%x)
  return (%r))IR");
  auto before = g->copy();
  EXPECT_TRUE(eliminate_dead_code(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::sigmoid\nCHECK-NOT: aten::tanh\nCHECK: aten::relu", *g));
  torch::manual_seed(1);
  for (bool c : {true, false}) {
    EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({2, 3}), c}));
  }
}

TEST(EliminateDeadCode, KeepsSideEffectsAndReportsNoChange) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %y : Tensor = aten::add_(%x, %x, %one)
  %s : str = prim::Constant[value="hello"]()
  prim::Print(%s)
  return (%x))IR");
  EXPECT_FALSE(eliminate_dead_code(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::add_\nCHECK: prim::Print", *g));
}

}  // namespace
}  // namespace kiln::lowering
