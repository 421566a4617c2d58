// unroll_loops: short constant for-loops become straight code; others stay loops.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(UnrollLoops, UnrollsShortConstantLoop) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %three : int = prim::Constant[value=3]()
  %t : bool = prim::Constant[value=1]()
  %one : int = prim::Constant[value=1]()
  %r : Tensor = prim::Loop(%three, %t, %x)
    block0(%i : int, %acc : Tensor):
      %s : Tensor = aten::mul(%acc, %i)
      %n : Tensor = aten::add(%s, %x, %one)
      -> (%t, %n)
  return (%r))IR");
  auto before = g->copy();
  EXPECT_TRUE(unroll_loops(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: prim::Loop\nCHECK: aten::mul\nCHECK: aten::mul\nCHECK: aten::mul\n"
      "CHECK-NOT: aten::mul",
      *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{2, 3}})));
}

TEST(UnrollLoops, KeepsDynamicLongAndWhileLoops) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %n : int):
  %many : int = prim::Constant[value=100]()
  %two : int = prim::Constant[value=2]()
  %t : bool = prim::Constant[value=1]()
  %one : int = prim::Constant[value=1]()
  %a : Tensor = prim::Loop(%n, %t, %x)
    block0(%i : int, %acc : Tensor):
      %s : Tensor = aten::add(%acc, %x, %one)
      -> (%t, %s)
  %b : Tensor = prim::Loop(%many, %t, %a)
    block0(%j : int, %acc2 : Tensor):
      %s2 : Tensor = aten::add(%acc2, %one, %one)
      -> (%t, %s2)
  %c : Tensor = prim::Loop(%two, %t, %b)
    block0(%k : int, %acc3 : Tensor):
      %s3 : Tensor = aten::add(%acc3, %one, %one)
      %go : bool = aten::lt(%k, %one)
      -> (%go, %s3)
  return (%c))IR");
  auto before = g->copy();
  EXPECT_FALSE(unroll_loops(g));
  EXPECT_TRUE(testing::file_check("CHECK: prim::Loop\nCHECK: prim::Loop\nCHECK: prim::Loop", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({2}), int64_t{3}}));
}

}  // namespace
}  // namespace kiln::lowering
