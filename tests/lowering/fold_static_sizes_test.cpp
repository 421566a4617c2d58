// fold_static_sizes: size, dim and numel of an argument whose dims are known become constants;
// dims left dynamic, other arguments and other tensors stay queries.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(FoldStaticSizes, KnownDimsBecomeConstantsDynamicOnesStay) {
  auto g = testing::parse(R"IR(
graph(%self : Tensor, %x : Tensor, %y : Tensor):
  %0 : int = prim::Constant[value=0]()
  %1 : int = prim::Constant[value=1]()
  %m1 : int = prim::Constant[value=-1]()
  %b : int = aten::size(%x, %0)
  %c : int = aten::size(%x, %1)
  %w : int = aten::size(%x, %m1)
  %all : int[] = aten::size(%x)
  %r : int = aten::dim(%x)
  %n : int = aten::numel(%x)
  %y0 : int = aten::size(%y, %0)
  %z : Tensor = aten::relu(%x)
  %z1 : int = aten::size(%z, %1)
  return (%b, %c, %w, %all, %r, %n, %y0, %z1))IR");
  const std::vector<StaticDims> dims = {std::vector<std::optional<int64_t>>{std::nullopt, 8, 5},
                                        std::nullopt};
  EXPECT_TRUE(fold_static_sizes(g, dims));
  // The batch of %x, its whole size and numel (dynamic batch), %y and %z stay queries.
  const std::vector<std::string> kinds = {"aten::size", "prim::Constant", "prim::Constant",
                                          "aten::size", "prim::Constant", "aten::numel",
                                          "aten::size", "aten::size"};
  ASSERT_EQ(g->outputs().size(), kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(g->outputs()[i]->node()->kind().toQualString(), kinds[i]) << "output " << i;
  }
  EXPECT_EQ(torch::jit::toIValue(g->outputs()[1])->toInt(), 8);
  EXPECT_EQ(torch::jit::toIValue(g->outputs()[2])->toInt(), 5);
  EXPECT_EQ(torch::jit::toIValue(g->outputs()[4])->toInt(), 3);
}

TEST(FoldStaticSizes, FullyStaticArgumentsFoldEveryQuery) {
  auto g = testing::parse(R"IR(
graph(%self : Tensor, %x : Tensor):
  %all : int[] = aten::size(%x)
  %n : int = aten::numel(%x)
  return (%all, %n))IR");
  EXPECT_TRUE(fold_static_sizes(g, {std::vector<std::optional<int64_t>>{2, 3}}));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::size\nCHECK-NOT: aten::numel", *g));
  for (const torch::jit::Value* out : g->outputs()) {
    EXPECT_EQ(out->node()->kind(), c10::prim::Constant);
  }
  EXPECT_EQ(torch::jit::toIValue(g->outputs()[0])->toIntVector(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(torch::jit::toIValue(g->outputs()[1])->toInt(), 6);
  EXPECT_FALSE(fold_static_sizes(g, {std::vector<std::optional<int64_t>>{2, 3}}));
}

}  // namespace
}  // namespace kiln::lowering
