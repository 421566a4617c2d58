// unpack_log_softmax: log_softmax(x, dim, dtype) becomes log(softmax(x, dim, dtype)).
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(UnpackLogSoftmax, UnpacksIntDimForm) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::log_softmax(%x, %one, %none)
  return (%y))IR");
  auto before = g->copy();
  EXPECT_TRUE(unpack_log_softmax(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::log_softmax\nCHECK: aten::softmax(%x, %one, %none)\nCHECK: aten::log(",
      *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{3, 7}})));
}

TEST(UnpackLogSoftmax, LeavesOtherSoftmaxes) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %f : bool = prim::Constant[value=0]()
  %y : Tensor = aten::softmax(%x, %one, %none)
  %z : Tensor = aten::_log_softmax(%x, %one, %f)
  return (%y, %z))IR");
  EXPECT_FALSE(unpack_log_softmax(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::softmax\nCHECK: aten::_log_softmax", *g));
}

}  // namespace
}  // namespace kiln::lowering
