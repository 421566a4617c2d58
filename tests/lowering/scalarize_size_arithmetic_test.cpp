// scalarize_size_arithmetic: traced size math on 0-d tensors becomes int math; tensor uses of a
// result keep a NumToTensor; arithmetic on real tensors is left alone.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(ScalarizeSizeArithmetic, TracedReshapeSizesBecomeInts) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %n : int = aten::size(%x, %zero)
  %c : int = aten::size(%x, %one)
  %nt : Tensor = prim::NumToTensor(%n)
  %ct : Tensor = prim::NumToTensor(%c)
  %half : Tensor = aten::floor_divide(%ct, %two)
  %prod : Tensor = aten::mul(%nt, %two)
  %sum : Tensor = aten::add(%prod, %half, %one)
  %a : int = aten::Int(%prod)
  %b : int = aten::Int(%half)
  %shape : int[] = prim::ListConstruct(%a, %b)
  %y : Tensor = aten::reshape(%x, %shape)
  %keep : Tensor = aten::mul(%y, %sum)
  return (%keep))IR");
  auto before = g->copy();
  EXPECT_TRUE(scalarize_size_arithmetic(g));
  torch::jit::EliminateDeadCode(g);
  EXPECT_TRUE(
      testing::file_check("CHECK: aten::floordiv\nCHECK: aten::mul(%n, %two)\nCHECK: aten::add\n"
                          "CHECK-NOT: aten::Int\nCHECK: aten::reshape",
                          *g));
  EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({4, 6})}));
}

// swin's window padding: pad = (7 - W % 7) % 7, traced as rsub and remainder of 0-d tensors.
TEST(ScalarizeSizeArithmetic, ReversedSubtractionAndRemainder) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %seven : int = prim::Constant[value=7]()
  %w : int = aten::size(%x, %one)
  %wt : Tensor = prim::NumToTensor(%w)
  %m : Tensor = aten::remainder(%wt, %seven)
  %r : Tensor = aten::rsub(%m, %seven, %one)
  %p : Tensor = aten::remainder(%r, %seven)
  %pad : int = aten::Int(%p)
  %zero : int = prim::Constant[value=0]()
  %pads : int[] = prim::ListConstruct(%zero, %pad)
  %fill : float = prim::Constant[value=0.]()
  %mode : str = prim::Constant[value="constant"]()
  %y : Tensor = aten::pad(%x, %pads, %mode, %fill)
  return (%y))IR");
  auto before = g->copy();
  EXPECT_TRUE(scalarize_size_arithmetic(g));
  torch::jit::EliminateDeadCode(g);
  EXPECT_TRUE(
      testing::file_check("CHECK: aten::sub(%seven\nCHECK-NOT: aten::Int\nCHECK: aten::pad", *g));
  for (int64_t w : {5, 7, 12, 14}) {
    EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({2, w})})) << w;
  }
}

TEST(ScalarizeSizeArithmetic, LeavesTensorArithmeticAlone) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor):
  %two : int = prim::Constant[value=2]()
  %a : Tensor = aten::mul(%x, %two)
  %b : Tensor = aten::floor_divide(%a, %y)
  %i : int = aten::Int(%b)
  %t : Tensor = prim::NumToTensor(%i)
  return (%t))IR");
  EXPECT_FALSE(scalarize_size_arithmetic(g));
}

}  // namespace
}  // namespace kiln::lowering
