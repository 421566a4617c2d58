// fuse_linear: addmm / matmul + add with a transposed 2-D weight become aten::linear.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(FuseLinear, FusesAddmmMatmulAddAndBareMatmul) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %w : Float(4, 8), %b : Float(4), %x3 : Tensor):
  %one : int = prim::Constant[value=1]()
  %wt : Tensor = aten::t(%w)
  %a : Tensor = aten::addmm(%b, %x, %wt, %one, %one)
  %m : Tensor = aten::matmul(%x3, %wt)
  %o : Tensor = aten::add(%b, %m, %one)
  %n : Tensor = aten::matmul(%x, %wt)
  return (%a, %o, %n))IR");
  auto before = g->copy();
  EXPECT_TRUE(fuse_linear(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK: aten::linear(%x, %w, %b)\nCHECK: aten::linear(%x3, %w, %b)\n"
      "CHECK: aten::linear(%x, %w, %\nCHECK-NOT: aten::matmul\nCHECK-NOT: aten::addmm",
      *g));
  EXPECT_TRUE(testing::same_values(
      *before, *g, testing::random_inputs({{2, 8}, {4, 8}, {4}, {3, 2, 8}}), 1e-5, 1e-5));
}

TEST(FuseLinear, LeavesNonLinearShapes) {
  // Untransposed weights, a scaled addmm, a weight of unknown rank.
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %w : Float(8, 4), %b : Float(4), %u : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %m : Tensor = aten::matmul(%x, %w)
  %a : Tensor = aten::addmm(%b, %x, %w, %one, %one)
  %ut : Tensor = aten::t(%u)
  %a2 : Tensor = aten::addmm(%b, %x, %ut, %two, %one)
  %mu : Tensor = aten::matmul(%x, %ut)
  return (%m, %a, %a2, %mu))IR");
  auto before = g->copy();
  EXPECT_FALSE(fuse_linear(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::linear", *g));
  EXPECT_TRUE(
      testing::same_values(*before, *g, testing::random_inputs({{3, 8}, {8, 4}, {4}, {4, 8}})));
}

TEST(FuseLinear, KeepsABiasThatIsNotOneDimensionalOutside) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %w : Float(4, 8), %b2 : Float(3, 4)):
  %one : int = prim::Constant[value=1]()
  %wt : Tensor = aten::t(%w)
  %m : Tensor = aten::matmul(%x, %wt)
  %o : Tensor = aten::add(%m, %b2, %one)
  return (%o))IR");
  auto before = g->copy();
  EXPECT_TRUE(fuse_linear(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::linear(%x, %w, %\nCHECK: aten::add(", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{3, 8}, {4, 8}, {3, 4}}),
                                   1e-5, 1e-5));
}

}  // namespace
}  // namespace kiln::lowering
