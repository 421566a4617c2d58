// remove_contiguous: drops contiguous; a view of it becomes reshape; written copies stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(RemoveContiguous, RemovesContiguousAndKeepsViewsValid) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %m1 : int = prim::Constant[value=-1]()
  %t : Tensor = aten::transpose(%x, %zero, %one)
  %c : Tensor = aten::contiguous(%t, %zero)
  %shape : int[] = prim::ListConstruct(%m1)
  %v : Tensor = aten::view(%c, %shape)
  return (%v))IR");
  auto before = g->copy();
  EXPECT_TRUE(remove_contiguous(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::contiguous\nCHECK: aten::reshape(%t\nCHECK-NOT: aten::view", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{3, 4}})));
}

TEST(RemoveContiguous, KeepsCopiesThatAreWrittenAndOtherFormats) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %cl : int = prim::Constant[value=2]()
  %one : int = prim::Constant[value=1]()
  %xt : Tensor = aten::transpose(%x, %zero, %one)
  %c : Tensor = aten::contiguous(%xt, %zero)
  %w : Tensor = aten::add_(%c, %one, %one)
  %l : Tensor = aten::contiguous(%x, %cl)
  %r : Tensor = aten::add(%x, %l, %one)
  return (%r, %w))IR");
  auto before = g->copy();
  EXPECT_FALSE(remove_contiguous(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::contiguous\nCHECK: aten::contiguous", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{2, 2, 3, 4}})));
}

}  // namespace
}  // namespace kiln::lowering

namespace kiln::lowering {
namespace {

// nn.MultiheadAttention in torch 2.x: proj.contiguous(), then proj[0].view(...). Dropping the copy
// would make view() meet non-contiguous memory.
TEST(RemoveContiguous, KeepsCopyThatAViewOfAViewNeeds) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %m : int = prim::Constant[value=-1]()
  %t : Tensor = aten::transpose(%x, %zero, %one)
  %c : Tensor = aten::contiguous(%t, %zero)
  %s : Tensor = aten::select(%c, %zero, %zero)
  %shape : int[] = prim::ListConstruct(%m)
  %v : Tensor = aten::view(%s, %shape)
  return (%v))IR");
  auto before = g->copy();
  EXPECT_FALSE(remove_contiguous(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::contiguous\nCHECK: aten::view", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{3, 4, 5}})));
}

}  // namespace
}  // namespace kiln::lowering
