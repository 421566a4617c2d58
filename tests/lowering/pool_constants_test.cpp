// pool_constants: duplicate constants merge; distinct ones stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(PoolConstants, MergesDuplicatesAcrossBlocks) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %c : bool):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::add(%x, %x, %one)
  %r : Tensor = prim::If(%c)
    block0():
      %one2 : int = prim::Constant[value=1]()
      %b : Tensor = aten::add(%a, %x, %one2)
      -> (%b)
    block1():
      -> (%a)
  return (%r))IR");
  auto before = g->copy();
  EXPECT_TRUE(pool_constants(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK: prim::Constant[value=1]\nCHECK-NOT: prim::Constant[value=1]", *g));
  for (bool c : {true, false}) {
    auto in = testing::random_inputs({{3}});
    in.emplace_back(c);
    EXPECT_TRUE(testing::same_values(*before, *g, in));
  }
}

TEST(PoolConstants, NoChangeWhenAlreadyPooled) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %a : Tensor = aten::add(%x, %x, %one)
  %b : Tensor = aten::add(%a, %x, %two)
  return (%b))IR");
  EXPECT_FALSE(pool_constants(g));
  EXPECT_TRUE(testing::file_check("CHECK-DAG: value=1\nCHECK-DAG: value=2", *g));
}

}  // namespace
}  // namespace kiln::lowering
