// remove_noop_to: aten::to to the dtype/device a tensor has goes; real casts stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(RemoveNoopTo, RemovesCastsThatChangeNothing) {
  auto g = testing::parse(R"IR(
graph(%x : Float(2, 3)):
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %f32 : int = prim::Constant[value=6]()
  %a : Tensor = aten::to(%x, %f32, %f, %f, %none)
  %b : Tensor = aten::to(%a, %a, %f, %f, %none)
  %y : Tensor = aten::relu(%b)
  return (%y))IR");
  auto before = g->copy();
  EXPECT_TRUE(remove_noop_to(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::to\nCHECK: aten::relu(%x)", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{2, 3}})));
}

TEST(RemoveNoopTo, KeepsCastsThatChangeDtypeOrCopyOrUnknown) {
  auto g = testing::parse(R"IR(
graph(%x : Float(2, 3), %u : Tensor):
  %f : bool = prim::Constant[value=0]()
  %t : bool = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %f64 : int = prim::Constant[value=7]()
  %f32 : int = prim::Constant[value=6]()
  %a : Tensor = aten::to(%x, %f64, %f, %f, %none)
  %b : Tensor = aten::to(%x, %f32, %f, %t, %none)
  %c : Tensor = aten::to(%u, %f32, %f, %f, %none)
  return (%a, %b, %c))IR");
  auto before = g->copy();
  EXPECT_FALSE(remove_noop_to(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::to\nCHECK: aten::to\nCHECK: aten::to", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{2, 3}, {2, 3}})));
}

}  // namespace
}  // namespace kiln::lowering
