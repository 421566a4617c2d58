// remove_noops: detach, alias, lift_fresh, x.t().t(), x.*_as(x), expand(x, x.size()) read x
// directly.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(RemoveNoops, RemovesIdentityOps) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %f : bool = prim::Constant[value=0]()
  %d : Tensor = aten::detach(%x)
  %a : Tensor = aten::lift_fresh(%d)
  %t1 : Tensor = aten::t(%a)
  %t2 : Tensor = aten::t(%t1)
  %s : int[] = aten::size(%t2)
  %e : Tensor = aten::expand(%t2, %s, %f)
  %v : Tensor = aten::view_as(%e, %e)
  %r : Tensor = aten::type_as(%v, %v)
  %y : Tensor = aten::sigmoid(%r)
  return (%y))IR");
  auto before = g->copy();
  EXPECT_TRUE(remove_noops(g));
  EXPECT_TRUE(
      testing::file_check("CHECK-NOT: aten::detach\nCHECK-NOT: aten::lift_fresh\nCHECK-NOT: "
                          "aten::expand\nCHECK-NOT: aten::view_as\n"
                          "CHECK-NOT: aten::type_as\nCHECK: aten::sigmoid(%x)",
                          *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{3, 4}})));
}

TEST(RemoveNoops, KeepsOpsThatChangeValues) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor):
  %f : bool = prim::Constant[value=0]()
  %t : Tensor = aten::t(%x)
  %s : int[] = aten::size(%y)
  %e : Tensor = aten::expand(%t, %s, %f)
  %v : Tensor = aten::view_as(%e, %y)
  return (%v))IR");
  EXPECT_FALSE(remove_noops(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::t\nCHECK: aten::expand\nCHECK: aten::view_as", *g));
  auto before = g->copy();
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{1, 3}, {2, 3, 1}})));
}

}  // namespace
}  // namespace kiln::lowering
