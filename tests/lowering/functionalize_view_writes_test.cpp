// functionalize_view_writes: fills and copies through slice/select views of a tensor the graph
// creates become scatters into a new value of it, with the same results; writes an alias could
// observe stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

// swin's shifted-window mask, in small: zeros, then fills of 2-d regions (negative bounds, a
// scalar and a 0-d tensor value), then readers of the mask after the writes.
TEST(FunctionalizeViewWrites, FillsOfRegionsOfZerosBecomeScatters) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %two : Tensor):
  %none : NoneType = prim::Constant()
  %0 : int = prim::Constant[value=0]()
  %1 : int = prim::Constant[value=1]()
  %m3 : int = prim::Constant[value=-3]()
  %m1 : int = prim::Constant[value=-1]()
  %s6 : int = prim::Constant[value=6]()
  %sizes : int[] = prim::ListConstruct(%s6, %s6)
  %m : Tensor = aten::new_zeros(%x, %sizes, %none, %none, %none, %none)
  %r1 : Tensor = aten::slice(%m, %0, %0, %m3, %1)
  %c1 : Tensor = aten::slice(%r1, %1, %m3, %m1, %1)
  %w1 : Tensor = aten::fill_(%c1, %1)
  %r2 : Tensor = aten::slice(%m, %0, %m3, %none, %1)
  %c2 : Tensor = aten::slice(%r2, %1, %0, %m3, %1)
  %w2 : Tensor = aten::fill_(%c2, %two)
  %y : Tensor = aten::add(%x, %m, %1)
  return (%y))IR");
  auto before = g->copy();
  EXPECT_TRUE(functionalize_view_writes(g));
  EXPECT_TRUE(testing::file_check(R"(CHECK: aten::full_like
CHECK: aten::slice_scatter
CHECK: aten::slice_scatter
CHECK: aten::expand_as
CHECK: aten::slice_scatter
CHECK: aten::slice_scatter
CHECK: aten::add
CHECK-NOT: aten::fill_)",
                                  *g));
  EXPECT_TRUE(testing::same_values(*before, *g,
                                   {torch::randn({6, 6}), torch::tensor(2.5, torch::kDouble)}));
}

// x[:, 1] = src (broadcast from [1], cast from f64) into a clone; a reader of the clone before
// the write keeps the old values.
TEST(FunctionalizeViewWrites, CopiesIntoSelectedRowsBecomeSelectScatters) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %src : Tensor):
  %none : NoneType = prim::Constant()
  %0 : int = prim::Constant[value=0]()
  %1 : int = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %c : Tensor = aten::clone(%x, %none)
  %before : Tensor = aten::mul(%c, %c)
  %v : Tensor = aten::select(%c, %1, %1)
  %w : Tensor = aten::copy_(%v, %src, %f)
  %y : Tensor = aten::add(%c, %before, %1)
  return (%y))IR");
  auto before = g->copy();
  EXPECT_TRUE(functionalize_view_writes(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::select_scatter\nCHECK-NOT: aten::copy_", *g));
  EXPECT_TRUE(
      testing::same_values(*before, *g, {torch::randn({3, 4}), torch::randn({1}, torch::kDouble)}));
}

TEST(FunctionalizeViewWrites, KeepsWritesAnAliasCouldObserve) {
  // To a graph input.
  auto input = testing::parse(R"IR(
graph(%x : Tensor):
  %0 : int = prim::Constant[value=0]()
  %1 : int = prim::Constant[value=1]()
  %v : Tensor = aten::slice(%x, %0, %0, %1, %1)
  %w : Tensor = aten::fill_(%v, %1)
  return (%x))IR");
  EXPECT_FALSE(functionalize_view_writes(input));
  // Through a view of the base taken before the write and read after it.
  auto view = testing::parse(R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %0 : int = prim::Constant[value=0]()
  %1 : int = prim::Constant[value=1]()
  %c : Tensor = aten::clone(%x, %none)
  %t : Tensor = aten::t(%c)
  %v : Tensor = aten::slice(%c, %0, %0, %1, %1)
  %w : Tensor = aten::fill_(%v, %1)
  %y : Tensor = aten::mul(%t, %t)
  return (%y))IR");
  EXPECT_FALSE(functionalize_view_writes(view));
  // A view in the chain that is read elsewhere, and a write whose result is used.
  auto shared = testing::parse(R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %0 : int = prim::Constant[value=0]()
  %1 : int = prim::Constant[value=1]()
  %c : Tensor = aten::clone(%x, %none)
  %v : Tensor = aten::slice(%c, %0, %0, %1, %1)
  %w : Tensor = aten::fill_(%v, %1)
  %d : Tensor = aten::clone(%x, %none)
  %u : Tensor = aten::slice(%d, %0, %0, %1, %1)
  %z : Tensor = aten::fill_(%u, %1)
  %y : Tensor = aten::add(%v, %z, %1)
  return (%y, %c, %d))IR");
  EXPECT_FALSE(functionalize_view_writes(shared));
  EXPECT_TRUE(testing::file_check("CHECK: aten::fill_\nCHECK: aten::fill_", *shared));
}

}  // namespace
}  // namespace kiln::lowering
