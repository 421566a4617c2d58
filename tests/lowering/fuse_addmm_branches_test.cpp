// fuse_addmm_branches: If(addmm | matmul + add_) on the same operands becomes matmul + add.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

constexpr const char* kBranches = R"IR(
graph(%x : Tensor, %w : Float(4, 8), %b : Float(4)):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %d : int = aten::dim(%x)
  %is2d : bool = aten::eq(%d, %two)
  %r : Tensor = prim::If(%is2d)
    block0():
      %wt1 : Tensor = aten::t(%w)
      %a : Tensor = aten::addmm(%b, %x, %wt1, %one, %one)
      -> (%a)
    block1():
      %wt2 : Tensor = aten::t(%w)
      %m : Tensor = aten::matmul(%x, %wt2)
      %o : Tensor = aten::add_(%m, %OTHER, %one)
      -> (%o)
  return (%r))IR";

std::string with_other_bias(const std::string& bias) {
  std::string ir = kBranches;
  ir.replace(ir.find("%OTHER"), 6, bias);
  return ir;
}

TEST(FuseAddmmBranches, CollapsesTheTwoLinearBranches) {
  auto g = testing::parse(with_other_bias("%b"));
  auto before = g->copy();
  EXPECT_TRUE(fuse_addmm_branches(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: prim::If\nCHECK: aten::t(%w)\nCHECK: aten::matmul(%x\nCHECK: aten::add(", *g));
  for (auto shape : std::vector<std::vector<int64_t>>{{2, 8}, {3, 2, 8}}) {
    EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({shape, {4, 8}, {4}}),
                                     1e-5, 1e-5));
  }
}

TEST(FuseAddmmBranches, LeavesBranchesThatDiffer) {
  auto g = testing::parse(with_other_bias("%x"));
  EXPECT_FALSE(fuse_addmm_branches(g));
  EXPECT_TRUE(testing::file_check("CHECK: prim::If\nCHECK: aten::addmm\nCHECK: aten::matmul", *g));
}

}  // namespace
}  // namespace kiln::lowering
