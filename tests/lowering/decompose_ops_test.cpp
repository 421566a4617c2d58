// decompose_ops: var/std, type_as, square, hardtanh, relu6 become engine ops; native ops stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(DecomposeOps, DecomposesVarianceAndStd) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %dims : int[] = prim::Constant[value=[1, 2]]()
  %last : int[] = prim::Constant[value=[-1]]()
  %v : Tensor = aten::var(%x, %dims, %t, %t)
  %s : Tensor = aten::std(%x, %last, %f, %f)
  %w : Tensor = aten::var(%x, %f)
  %u : Tensor = aten::std(%x, %t)
  return (%v, %s, %w, %u))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::var\nCHECK-NOT: aten::std\nCHECK: aten::mean\nCHECK: aten::sqrt", *g));
  EXPECT_TRUE(
      testing::same_values(*before, *g, testing::random_inputs({{2, 3, 4, 5}}), 1e-5, 1e-5));
}

TEST(DecomposeOps, RewritesCompositeActivationsAndCasts) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor):
  %lo : float = prim::Constant[value=-0.5]()
  %hi : float = prim::Constant[value=0.5]()
  %d : int = prim::Constant[value=7]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %yd : Tensor = aten::to(%y, %d, %f, %f, %none)
  %a : Tensor = aten::hardtanh(%x, %lo, %hi)
  %b : Tensor = aten::relu6(%x)
  %c : Tensor = aten::square(%x)
  %e : Tensor = aten::type_as(%c, %yd)
  return (%a, %b, %e))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::hardtanh\nCHECK: aten::clamp\nCHECK: aten::clamp\nCHECK: aten::mul"
      "\nCHECK: aten::to(%",
      *g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::relu6\nCHECK-NOT: aten::type_as", *g));
  auto in = testing::random_inputs({{3, 4}, {3, 4}});
  in[0] = in[0].toTensor() * 8;
  EXPECT_TRUE(testing::same_values(*before, *g, in));
}

TEST(DecomposeOps, KeepsNativeOpsAndUnknownArguments) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %dims : int[]):
  %t : bool = prim::Constant[value=1]()
  %a : Tensor = aten::hardswish(%x)
  %b : Tensor = aten::silu(%a)
  %c : Tensor = aten::hardsigmoid(%b)
  %d : Tensor = aten::rsqrt(%c)
  %v : Tensor = aten::var(%d, %dims, %t, %t)
  return (%v))IR");
  EXPECT_FALSE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK: aten::hardswish\nCHECK: aten::silu\nCHECK: aten::hardsigmoid\nCHECK: aten::rsqrt"
      "\nCHECK: aten::var",
      *g));
}

}  // namespace
}  // namespace kiln::lowering
