// remove_mutation: in-place ops on fresh values become functional; writes an alias could observe
// (to a graph input) stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(RemoveMutation, InPlaceOpsOnFreshValuesBecomeFunctional) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::mul(%x, %y)
  %b : Tensor = aten::relu_(%a)
  %c : Tensor = aten::add_(%b, %y, %one)
  return (%c))IR");
  auto before = g->copy();
  EXPECT_TRUE(remove_mutation(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::relu(\nCHECK: aten::add(\nCHECK-NOT: _(", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({2, 3}), torch::randn({2, 3})}));
}

TEST(RemoveMutation, KeepsWritesToInputs) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %b : Tensor = aten::relu_(%x)
  return (%b))IR");
  EXPECT_FALSE(remove_mutation(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::relu_", *g));
}

}  // namespace
}  // namespace kiln::lowering
