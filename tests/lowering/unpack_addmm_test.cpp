// unpack_addmm: addmm(b, x, w, 1, 1) becomes matmul + add; scaled addmm stays.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/lower.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(UnpackAddmm, UnpacksPlainAddmmInBlocks) {
  auto g = testing::parse(R"IR(
graph(%b : Tensor, %x : Tensor, %w : Tensor, %c : bool):
  %one : int = prim::Constant[value=1]()
  %r : Tensor = prim::If(%c)
    block0():
      %a : Tensor = aten::addmm(%b, %x, %w, %one, %one)
      -> (%a)
    block1():
      -> (%b)
  return (%r))IR");
  auto before = g->copy();
  EXPECT_TRUE(unpack_addmm(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::addmm\nCHECK: aten::matmul(%x, %w)\nCHECK: aten::add(", *g));
  for (bool c : {true, false}) {
    auto in = testing::random_inputs({{3, 4}, {3, 5}, {5, 4}});
    in.emplace_back(c);
    EXPECT_TRUE(testing::same_values(*before, *g, in, 1e-5, 1e-5));
  }
}

TEST(UnpackAddmm, KeepsScaledAddmm) {
  auto g = testing::parse(R"IR(
graph(%b : Tensor, %x : Tensor, %w : Tensor):
  %one : int = prim::Constant[value=1]()
  %half : float = prim::Constant[value=0.5]()
  %a : Tensor = aten::addmm(%b, %x, %w, %half, %one)
  return (%a))IR");
  EXPECT_FALSE(unpack_addmm(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::addmm", *g));
}

TEST(UnpackAddmm, ReplacementKeepsTheFallbackMark) {
  auto g = testing::parse(R"IR(
graph(%b : Tensor, %x : Tensor, %w : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::addmm[kiln_torch_executed=1](%b, %x, %w, %one, %one)
  return (%a))IR");
  EXPECT_TRUE(unpack_addmm(g));
  size_t marked = 0;
  for (const torch::jit::Node* n : g->nodes()) marked += is_torch_executed(n);
  EXPECT_EQ(marked, 2u) << *g;  // the matmul and the add
}

}  // namespace
}  // namespace kiln::lowering
