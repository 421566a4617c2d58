// lower_core_aten: core ATen spellings (torch.export's run_decompositions) become the ops the
// other passes and converters take, with the same values; ops whose extra results are used stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(LowerCoreAten, MultiResultOpsWithOnlyTheirFirstResultUsed) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor, %mean : Tensor, %var : Tensor, %lw : Tensor):
  %momentum : float = prim::Constant[value=0.1]()
  %eps : float = prim::Constant[value=1e-05]()
  %positive : Tensor = aten::exp(%var)
  %bn : Tensor, %m : Tensor, %v : Tensor = aten::_native_batch_norm_legit_no_training(%x, %w, %b, %mean, %positive, %momentum, %eps)
  %shape : int[] = prim::Constant[value=[5]]()
  %ln : Tensor, %lm : Tensor, %lr : Tensor = aten::native_layer_norm(%bn, %shape, %lw, %lw, %eps)
  %k : int[] = prim::Constant[value=[2, 2]]()
  %z : int[] = prim::Constant[value=[0, 0]]()
  %d : int[] = prim::Constant[value=[1, 1]]()
  %f : bool = prim::Constant[value=0]()
  %p : Tensor, %i : Tensor = aten::max_pool2d_with_indices(%ln, %k, %k, %z, %d, %f)
  %drop : Tensor, %mask : Tensor = aten::native_dropout(%p, %momentum, %f)
  %alias : Tensor = aten::alias(%drop)
  return (%alias))IR");
  auto before = g->copy();
  EXPECT_TRUE(lower_core_aten(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK: aten::batch_norm(\nCHECK: aten::layer_norm(\nCHECK: aten::max_pool2d(\n"
      "CHECK-NOT: native_dropout\nCHECK-NOT: aten::alias\nCHECK-NOT: _with_indices",
      *g));
  EXPECT_TRUE(testing::same_values(
      *before, *g, testing::random_inputs({{2, 3, 4, 5}, {3}, {3}, {3}, {3}, {5}})));
}

TEST(LowerCoreAten, ConvolutionCopiesAndViews) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %w : Float(4, 3, 3, 3), %b : Tensor):
  %one : int[] = prim::Constant[value=[1, 1]]()
  %zero : int[] = prim::Constant[value=[0, 0]]()
  %f : bool = prim::Constant[value=0]()
  %groups : int = prim::Constant[value=1]()
  %c : Tensor = aten::convolution(%x, %w, %b, %one, %one, %one, %f, %zero, %groups)
  %dtype : int = prim::Constant[value=5]()
  %none : NoneType = prim::Constant()
  %h : Tensor = aten::_to_copy(%c, %dtype, %none, %none, %none, %f, %none)
  %size : int[] = prim::Constant[value=[2, -1]]()
  %v : Tensor = aten::_unsafe_view(%h, %size)
  return (%v))IR");
  auto before = g->copy();
  EXPECT_TRUE(lower_core_aten(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK: aten::conv2d(\nCHECK: aten::to(\nCHECK: aten::view(\nCHECK-NOT: aten::convolution",
      *g));
  EXPECT_TRUE(
      testing::same_values(*before, *g, testing::random_inputs({{2, 3, 6, 6}, {4, 3, 3, 3}, {4}})));
}

TEST(LowerCoreAten, KeepsOpsWhoseOtherResultsAreUsed) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %w : Tensor):
  %eps : float = prim::Constant[value=1e-05]()
  %shape : int[] = prim::Constant[value=[5]]()
  %ln : Tensor, %mean : Tensor, %rstd : Tensor = aten::native_layer_norm(%x, %shape, %w, %w, %eps)
  return (%ln, %mean))IR");
  EXPECT_FALSE(lower_core_aten(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::native_layer_norm", *g));
}

}  // namespace
}  // namespace kiln::lowering
